// json.hpp — a minimal JSON object writer for the stats/snapshot documents the C ABI returns.
#pragma once
#include <cstdint>
#include <sstream>
#include <string>

namespace zico {

class JsonWriter {
 public:
  JsonWriter() { out_.precision(17); }
  JsonWriter& open(char c) { sep(); out_ << c; first_ = true; return *this; }
  JsonWriter& close(char c) { out_ << c; first_ = false; return *this; }
  JsonWriter& key(const std::string& k) { sep(); out_ << '"' << k << "\":"; first_ = true; return *this; }
  template <class T> JsonWriter& num(const std::string& k, T v) { key(k); out_ << v; first_ = false; return *this; }
  JsonWriter& str(const std::string& k, const std::string& v) { key(k); out_ << '"' << v << '"'; first_ = false; return *this; }
  JsonWriter& boolean(const std::string& k, bool v) { key(k); out_ << (v ? "true" : "false"); first_ = false; return *this; }
  JsonWriter& null(const std::string& k) { key(k); out_ << "null"; first_ = false; return *this; }
  // A byte limit (budget, capacity): null for UINT64_MAX, the C ABI's ZICO_UNLIMITED ("none").
  JsonWriter& limit(const std::string& k, uint64_t v) { return v == UINT64_MAX ? null(k) : num(k, v); }
  std::string take() { return out_.str(); }

 private:
  void sep() { if (!first_) out_ << ','; first_ = false; }
  std::ostringstream out_;
  bool first_ = true;
};

}  // namespace zico
