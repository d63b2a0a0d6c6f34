// StopStringFilter: holds back generated text that might be the start of a stop string,
// so the client never sees a stop string or a piece of one.
#ifndef STRATA_TEXT_STOP_STRINGS_H_
#define STRATA_TEXT_STOP_STRINGS_H_

#include <string>
#include <string_view>
#include <vector>

namespace strata::text {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds `text` and returns what can be sent now. Once a stop string is complete,
  // stopped() is true and the text from the stop string on is dropped.
  std::string Feed(std::string_view text);
  // The text still held back, released at the end of the stream (not stopped).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_STOP_STRINGS_H_
