#include "server/batch_jsonl.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace strata::server {
namespace {

using nlohmann::json;

absl::Status Bad(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

absl::Status ReadSampling(const json& j, v1::SamplingParams* s, bool nested) {
  for (const auto& [key, value] : j.items()) {
    if (key == "temperature" || key == "top_p") {
      if (!value.is_number()) return Bad(absl::StrCat("'", key, "' must be a number"));
      const double v = value.get<double>();
      if (!std::isfinite(v)) return Bad(absl::StrCat("'", key, "' must be finite"));
      if (key == "temperature") s->set_temperature(static_cast<float>(v));
      if (key == "top_p") s->set_top_p(static_cast<float>(v));
    } else if (key == "seed") {
      if (!value.is_number_unsigned()) return Bad("'seed' must be a non-negative integer");
      s->set_seed(value.get<uint64_t>());
    } else if (nested) {
      return Bad(absl::StrCat("unknown key 'sampling.", key, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::BatchPrompt> ParseBatchLine(std::string_view line, std::string* id) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("the line is not valid JSON");
  if (!j.is_object()) return Bad("the line is not a JSON object");
  v1::BatchPrompt p;
  if (auto it = j.find("id"); it != j.end() && it->is_string()) {
    *id = it->get<std::string>();
    p.set_id(*id);
  } else if (it != j.end() && it->is_number_integer()) {
    *id = it->dump();  // numeric ids are common in JSONL files: kept as their text
    p.set_id(*id);
  } else {
    return Bad("'id' (a string) is missing");
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "id" || key == "temperature" || key == "top_p" || key == "seed") continue;
    if (key == "messages") {
      if (!value.is_array()) return Bad("'messages' must be an array");
      for (const json& m : value) {
        if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
            !m["content"].is_string() || m.size() != 2) {
          return Bad("each message must be {\"role\": string, \"content\": string}");
        }
        v1::Message* out = p.add_messages();
        out->set_role(m["role"].get<std::string>());
        out->set_content(m["content"].get<std::string>());
      }
    } else if (key == "token_ids") {
      if (!value.is_array()) return Bad("'token_ids' must be an array");
      for (const json& t : value) {
        if (!t.is_number_integer()) return Bad("'token_ids' must hold integers");
        const int64_t v = t.get<int64_t>();
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
          return Bad(absl::StrCat("token id ", v, " is out of range"));
        }
        p.add_token_ids(static_cast<int32_t>(v));
      }
    } else if (key == "max_new_tokens") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        return Bad("'max_new_tokens' must be a non-negative integer");
      }
      p.set_max_new_tokens(value.get<uint32_t>());
    } else if (key == "stop") {
      if (!value.is_array()) return Bad("'stop' must be an array of strings");
      for (const json& s : value) {
        if (!s.is_string()) return Bad("'stop' must be an array of strings");
        p.add_stop(s.get<std::string>());
      }
    } else if (key == "sampling") {
      if (!value.is_object()) return Bad("'sampling' must be an object");
      if (absl::Status s = ReadSampling(value, p.mutable_sampling(), /*nested=*/true); !s.ok()) return s;
    } else {
      return Bad(absl::StrCat("unknown key '", key, "'"));
    }
  }
  if (absl::Status s = ReadSampling(j, p.mutable_sampling(), /*nested=*/false); !s.ok()) return s;
  if (p.messages_size() == 0 && p.token_ids_size() == 0) return Bad("give 'messages' or 'token_ids'");
  return p;
}

std::string ResultLine(const v1::BatchResult& r, int line) {
  json j = {{"id", r.id()}, {"line", line}};
  if (r.has_error()) {
    j["error"] = {{"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(r.error().code()))},
                  {"message", r.error().message()}};
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  j["text"] = r.text();
  j["token_ids"] = std::vector<int32_t>(r.token_ids().begin(), r.token_ids().end());
  j["usage"] = {{"prompt_tokens", r.usage().prompt_tokens()},
                {"cached_tokens", r.usage().cached_tokens()},
                {"computed_tokens", r.usage().computed_tokens()},
                {"completion_tokens", r.usage().completion_tokens()}};
  j["finish_reason"] = r.finish_reason() == v1::FINISH_REASON_LENGTH ? "length" : "stop";
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ErrorLine(const std::string& id, int line, const absl::Status& status) {
  json j = {{"id", id},
            {"line", line},
            {"error", {{"code", absl::StatusCodeToString(status.code())}, {"message", std::string(status.message())}}}};
  if (id.empty()) j.erase("id");
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace strata::server
