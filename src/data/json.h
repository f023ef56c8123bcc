// Parsing a JSON text read from a file of a foreign format (transformers'
// config.json, tokenizer.json, vocab.json), with the one error every reader
// gives for text that is not JSON.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "capstep/ir.h"

namespace capstep::data {

// The parsed text; Error "<what> is not JSON: <the parser's message>" (or
// "not JSON: ..." with `what` empty, for a caller that names the file itself).
inline nlohmann::json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error((what.empty() ? std::string() : what + " is ") + "not JSON: " + e.what());
  }
}

}  // namespace capstep::data
