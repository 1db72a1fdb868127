#pragma once
// The ExponentialMovingAverage's state (private to core/ema): its entries, one per model tensor, and for a sharded
// EMA this rank's slice of them. ema.cpp implements the public class on it; ema_impl.cpp the work on tensors
// (alignment with a model, the update, the swap, the shard's layout and gather).
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "baton/communicator.h"
#include "baton/ema.h"
#include "baton/error.h"
#include "baton/text.h"  // glob_match
#include "ema/ema_kernel.h"
#include "sharding/layout.h"

namespace baton {

/// Throws unless 0 <= smoothing <= 1.
void check_ema_smoothing(double smoothing);
/// The device named `device` ("cpu", "cuda:1"), or an error naming the text.
c10::Device parse_ema_device(const std::string& device);

struct ExponentialMovingAverage::Impl {
  struct Entry {
    std::string name;
    bool averaged = false;
    std::vector<std::int64_t> shape;
    at::ScalarType dtype = at::kFloat;  // of the average
    // Sharded: the tensor's rows held by this rank live in the shard's buffer (slot `slot` of its layout); `ema`
    // is then only defined while the whole EMA is gathered for a swap.
    bool in_shard = false;
    std::size_t slot = 0;
    at::Tensor ema;     // the average; undefined while its storage is exchanged into the model
    at::Tensor stash;   // while swapped: the raw weights (their storage, or a backup copy)
    at::Tensor holder;  // while swapped by exchange: the model tensor that now holds the EMA's storage
    std::int64_t numel() const {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      return n;
    }
  };

  // A sharded EMA: this rank's rows of every floating tensor, in FSDP2's Shard(0) layout (sharding/layout.h: the
  // rows torch.chunk gives rank r), one flat buffer per dtype of the average. The same layout as a sharded run's
  // parameters, so the EMA of a rank's shard is made of that rank's rows, and one all-gather per dtype joins them.
  struct Shard {
    std::optional<sharding::Layout> layout;
    std::vector<at::Tensor> buffers;       // beside layout->dtypes()
    std::vector<std::size_t> entry_of;     // the entry of each slot
    const at::Tensor& buffer(at::ScalarType dtype) const;
    // Slot `slot`'s rows in its buffer: a view, so writing it writes the EMA.
    at::Tensor view(std::size_t slot) const;
  };

  EmaOptions options;
  std::vector<Entry> entries;
  std::unordered_map<std::string, std::size_t> index;
  bool initialized = false;
  bool swapped = false;
  ema_kernel::Plan plan;
  Shard shard;

  bool sharded() const { return options.shard_over != nullptr; }

  static at::Tensor current(const Entry& entry) {
    return entry.holder.defined() ? entry.holder.variable_data() : entry.ema;
  }

  // Whether an entry's average is at hand on this rank (not only a slice of it).
  static bool whole(const Entry& entry) { return entry.ema.defined() || entry.holder.defined(); }

  const Entry& entry(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end()) throw Error("EMA: no tensor named '" + name + "' (the EMA holds " +
                                       std::to_string(entries.size()) + " tensors of the model)");
    return entries[it->second];
  }

  void require_initialized(const char* action) const {
    if (!initialized)
      throw Error(std::string("EMA: ") + action +
                  " needs an initialised EMA: construct it from the model or call reset(model) first");
  }

  void require_not_swapped(const char* action) const {
    if (swapped)
      throw Error(std::string("EMA: cannot ") + action +
                  " while the model holds the EMA weights: call swap(model) again to put the raw weights back first");
  }

  bool averages(const std::string& name, const at::Tensor& tensor, bool parameter) const {
    if (!tensor.is_floating_point()) return false;
    if (!parameter && options.buffers == EmaBuffers::copy) return false;
    for (const auto& pattern : options.exclude)
      if (glob_match(pattern, name)) return false;
    return true;
  }

  at::ScalarType average_dtype(const at::Tensor& weight, bool averaged) const {
    at::ScalarType dtype = weight.scalar_type();
    if (averaged && options.float32 && (dtype == at::kBFloat16 || dtype == at::kHalf)) dtype = at::kFloat;
    return dtype;
  }

  c10::Device average_device(const at::Tensor& weight) const {
    return options.device.empty() ? weight.device() : parse_ema_device(options.device);
  }

  at::Tensor make_average(const at::Tensor& weight, bool averaged) const {
    return weight.detach().to(average_device(weight), average_dtype(weight, averaged), /*non_blocking=*/false,
                              /*copy=*/true, at::MemoryFormat::Contiguous);
  }

  // The weights held only as this rank's rows now (EmaOptions::held_rows), by name.
  std::unordered_map<std::string, HeldRows> held_now() const;

  // Builds the layout over the floating-point entries and fills this rank's rows from `weights` (the rows
  // themselves where `rows[i]`).
  void make_shard(const std::vector<at::Tensor>& weights, const std::vector<bool>& rows);

  // The whole average of every sharded entry, by entry index (undefined for the others): a collective, one
  // all-gather per dtype.
  std::vector<at::Tensor> gather() const;

  // Entry i's average as a tensor: from `gathered` (gather()'s result) for sharded entries not swapped in.
  at::Tensor average_of(std::size_t i, const std::vector<at::Tensor>& gathered) const {
    return whole(entries[i]) ? current(entries[i]) : gathered[i];
  }

  // The model's tensors in the EMA's order, checked name by name and shape by shape; a weight held as rows
  // (held_now) is its rows, with rows[i] set.
  std::vector<at::Tensor> align(const torch::nn::Module& model, std::vector<bool>& rows) const;

  // Entry i's average where this rank keeps it: its rows in the shard, or the whole tensor.
  at::Tensor kept(std::size_t i) const { return entries[i].in_shard ? shard.view(entries[i].slot) : entries[i].ema; }

  void update(const torch::nn::Module& model, double smoothing);

  static bool exchangeable(const at::Tensor& ema, const at::Tensor& weight) {
    return ema.scalar_type() == weight.scalar_type() && ema.device() == weight.device() &&
           ema.layout() == weight.layout();
  }

  // `rows`: align()'s. Rows are exchanged by copies, in place: the run gathers its units from them.
  void swap_in(const std::vector<at::Tensor>& weights, const std::vector<bool>& rows);

  void swap_out(const std::vector<at::Tensor>& weights, const std::vector<bool>& rows);

  // Sharded: the whole EMA for a swap, as views of one gathered buffer, and its release after (the entries
  // swapped as rows need none).
  void gather_for_swap(const std::vector<bool>& rows);

  void release_gathered();
};


}  // namespace baton
