// Two turns of one session through strata::client::Session: the answer streams to stdout,
// then a line of what the session cache did.
//   strata_client_example HOST:PORT SESSION [MESSAGE]
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>

#include "strata/client/session.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0] << " HOST:PORT SESSION [MESSAGE]\n";
    return 2;
  }
  strata::client::SessionOptions options;
  options.target = argv[1];
  options.session_id = argv[2];
  options.max_new_tokens = 24;
  auto session = strata::client::Session::Create(options);
  if (!session.ok()) {
    std::cerr << session.status() << "\n";
    return 1;
  }
  const std::string first = argc > 3 ? argv[3] : "Hello! What is a KV cache?";
  for (const std::string& message : {first, std::string("And why keep it between turns?")}) {
    auto turn = (*session)->Send(message, [](std::string_view text) { std::cout << text << std::flush; });
    if (!turn.ok()) {
      std::cerr << "\nturn failed: " << turn.status() << "\n";
      return 1;
    }
    const strata::v1::Usage& usage = turn->done.usage();
    std::cout << "\nturn " << (*session)->messages().size() / 2 << ": prompt " << usage.prompt_tokens() << ", reused "
              << usage.cached_tokens() << ", computed " << usage.computed_tokens() << ", tier "
              << strata::v1::Tier_Name(turn->done.cache_tier()) << "\n";
  }
  return 0;
}
