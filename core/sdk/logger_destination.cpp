// The SDK's logger destinations (baton/logger_destination.h): default behaviour and the image entry point.
#include "baton/logger_destination.h"

#include <string>

#include "baton/error.h"
#include "baton/logger.h"

namespace baton {

LoggerDestination::~LoggerDestination() = default;
void LoggerDestination::log_image(const Timestamp&, const std::string&, const Image&) {}
void LoggerDestination::flush() {}
void LoggerDestination::close() {}

ImageLogger::~ImageLogger() = default;
RunEndRecorder::~RunEndRecorder() = default;

void log_image(Logger& logger, std::string_view name, const Image& image) {
  if (name.empty()) throw Error("log_image: the image needs a name");
  if (image.height <= 0 || image.width <= 0 || !(image.channels == 1 || image.channels == 3 || image.channels == 4))
    throw Error("log_image '" + std::string(name) + "': expected a positive height and width and 1, 3 or 4 " +
                "channels, got " + std::to_string(image.height) + "x" + std::to_string(image.width) + "x" +
                std::to_string(image.channels));
  const auto expected = static_cast<std::size_t>(image.height * image.width * image.channels);
  if (image.pixels.size() != expected)
    throw Error("log_image '" + std::string(name) + "': " + std::to_string(image.pixels.size()) +
                " pixel values for a " + std::to_string(image.height) + "x" + std::to_string(image.width) + "x" +
                std::to_string(image.channels) + " image (" + std::to_string(expected) + " expected)");
  // The run's logger keeps images; a Logger of a test or an embedding program that does not simply drops them.
  if (auto* images = dynamic_cast<ImageLogger*>(&logger)) images->log_image(name, image);
}

}  // namespace baton
