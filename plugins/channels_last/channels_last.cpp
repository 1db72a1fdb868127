// Channels-last memory format (Composer's ChannelsLast): the model's 4-D weights and buffers and every 4-D input
// batch are stored NHWC instead of NCHW. The tensors keep their shapes and values; only the order of their
// elements in memory changes, which lets oneDNN (CPU) and cuDNN (tensor cores) run convolutions without
// reordering, notably under bf16/fp16 autocast. Checkpoints, model.safetensors and the EMA see logical tensors, so
// a checkpoint written with this plugin loads without it and the other way round.
//
//   [[plugins]]
//   name = "channels_last"      # no keys
//
// The model is converted at fit_start, eval_start and predict_start (whichever comes first; a resume has already
// restored the weights then); a batch at after_dataloader (training: before it is split into microbatches),
// eval_before_forward and predict_before_forward.
#include <string>
#include <vector>

#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/core/MemoryFormat.h>
#include <torch/nn/module.h>

#include "baton/plugin.h"

namespace {

using baton::Event;

constexpr auto kChannelsLast = c10::MemoryFormat::ChannelsLast;

// What the convolution kernels go by is the format a tensor's strides suggest, not whether it is contiguous in a
// format: a tensor with one channel ([N, 1, H, W] images, [C_out, 1, kH, kW] first-layer weights) counts as
// contiguous in both formats, yet its NCHW strides suggest NCHW, and one NCHW operand sends a convolution down the
// NCHW path (measured: the first layer then ran NCHW and the bf16 step gained nothing from the plugin).
bool needs_conversion(const at::Tensor& t) {
  return t.defined() && t.dim() == 4 && t.suggest_memory_format() != kChannelsLast;
}

// A copy with channels-last strides proper (Tensor::contiguous would return an ambiguous tensor as it is).
at::Tensor channels_last_copy(const at::Tensor& t) {
  at::Tensor out = at::empty(t.sizes(), t.options().memory_format(kChannelsLast));
  out.copy_(t);
  return out;
}

class ChannelsLast final : public baton::Algorithm {
 public:
  explicit ChannelsLast(const baton::PluginConfig& config) : fields_(read_fields(config)) {}

  void subscribe(baton::Subscriptions& events) override {
    events.on(Event::fit_start, this, &ChannelsLast::convert_model);
    events.on(Event::eval_start, this, &ChannelsLast::convert_model);
    events.on(Event::predict_start, this, &ChannelsLast::convert_model);
    events.on(Event::after_dataloader, this, &ChannelsLast::convert_batch);
    events.on(Event::eval_before_forward, this, &ChannelsLast::convert_batch);
    events.on(Event::predict_before_forward, this, &ChannelsLast::convert_batch);
  }

  void convert_batch(baton::State& state, baton::Logger&) {
    // Every field it was told about that is a 4-D floating tensor; other fields (labels, a timestep) stay as they are.
    for (const auto& field : fields_) {
      at::Tensor& t = state.batch[field];
      if (at::isFloatingType(t.scalar_type()) && needs_conversion(t)) t = channels_last_copy(t);
    }
  }

 private:
  // input_key: one field name or a list of them (default "inputs").
  static std::vector<std::string> read_fields(const baton::PluginConfig& config) {
    if (!config.has("input_key")) return {"inputs"};
    try {
      return {config.get<std::string>("input_key")};
    } catch (const baton::ConfigError&) {
    }
    try {
      auto fields = config.get<std::vector<std::string>>("input_key");
      if (!fields.empty()) return fields;
    } catch (const baton::ConfigError&) {
    }
    config.fail("input_key", "expected a batch field's name or a non-empty list of them");
  }

  std::vector<std::string> fields_;
  void convert_model(baton::State& state, baton::Logger& logger) {
    if (state.facts.model() == nullptr) return;
    c10::NoGradGuard no_grad;
    // set_data swaps the storage under the same tensor object, so the optimizer's and autograd's references to
    // the parameters stay valid.
    std::int64_t converted = 0;
    for (auto& p : state.facts.model()->parameters())
      if (needs_conversion(p)) {
        p.set_data(channels_last_copy(p));
        ++converted;
      }
    for (auto& b : state.facts.model()->buffers())
      if (needs_conversion(b)) {
        b.set_data(channels_last_copy(b));
        ++converted;
      }
    if (converted > 0 && !announced_) {
      logger.info("channels_last: " + std::to_string(converted) + " 4-D weight tensors in channels-last format");
      announced_ = true;
    }
  }

  bool announced_ = false;
};

}  // namespace

BATON_PLUGIN(ChannelsLast, "channels_last", "1.0.0",
             "channels-last (NHWC) memory format for 4-D weights and input batches")
