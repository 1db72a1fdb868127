#pragma once
// When the EMA updates and with which smoothing: the update interval in batches or epochs, and the warmup schedules
// (TensorFlow's and ema-pytorch's power schedule). Pure functions of the settings and the clock.
#include <cstdint>

#include "baton/event.h"
#include "baton/time.h"

#include "ema_settings.h"

namespace baton::ema_plugin {

/// Whether `event` is an update point: batch_end for an interval in ba, epoch_end for one in ep, when the count in
/// that unit is a multiple of the interval.
bool update_due(Event event, const Progress& progress, const Time& interval);

/// The smoothing of the next update, given `updates` made since the EMA (re)started (the initialising copy counts
/// as the first): s for no warmup, min(s, (1 + n) / (10 + n)) for tf, and for power
/// clamp(1 - (1 + n / inv_gamma)^-power, min_smoothing, s), which is 0 while n <= 0.
double warmup_smoothing(const EmaSettings& settings, double s, std::int64_t updates);

}  // namespace baton::ema_plugin
