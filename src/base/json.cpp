// accio base: recursive-descent JSON reader (RFC 8259), depth-limited.
#include "base/json.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace accio::base::json {
namespace {

class Parser {
 public:
  Parser(std::string_view t, std::initializer_list<std::string_view> skip) : t_(t), skip_(skip) {}

  Value document() {
    Value v = value(0, true);
    ws();
    if (i_ != t_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string("invalid JSON: ") + what + " at byte " + std::to_string(i_));
  }
  void ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\r' || t_[i_] == '\t')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail((std::string("expected '") + c + "'").c_str());
  }
  bool word(std::string_view w) {
    if (t_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  // keep: build the value; else only read it (every check made, nothing allocated): a member skipped.
  Value value(int depth, bool keep) {
    if (depth > 64) fail("nesting too deep");
    ws();
    if (i_ >= t_.size()) fail("unexpected end");
    Value v;
    const char c = t_[i_];
    if (c == '{') {
      ++i_;
      v.kind = Value::object;
      if (eat('}')) return v;
      do {
        ws();
        std::string k = string(keep);
        expect(':');
        const bool skipped = depth == 0 && std::find(skip_.begin(), skip_.end(), k) != skip_.end();
        Value m = value(depth + 1, keep && !skipped);
        if (keep && !skipped) v.members.emplace_back(std::move(k), std::move(m));
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind = Value::array;
      if (eat(']')) return v;
      do {
        Value item = value(depth + 1, keep);
        if (keep) v.items.push_back(std::move(item));
      } while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Value::string;
      v.str = string(keep);
    } else if (word("true")) {
      v.kind = Value::boolean;
      v.b = true;
    } else if (word("false")) {
      v.kind = Value::boolean;
    } else if (word("null")) {
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Value::number;
      v.num = number(keep);
    } else {
      fail("unexpected character");
    }
    return v;
  }

  double number(bool keep) {
    const size_t s = i_;
    if (t_[i_] == '-') ++i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      if (i_ == d) fail("digit expected");
    };
    digits();
    if (i_ < t_.size() && t_[i_] == '.') ++i_, digits();
    if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      ++i_;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      digits();
    }
    if (!keep) return 0;  // the grammar is checked above; only the value's range is not
    // from_chars, not strtod: the decimal point is '.' whatever locale the host program set.
    double v = 0;
    const auto r = std::from_chars(t_.data() + s, t_.data() + i_, v);
    if (r.ec == std::errc::result_out_of_range) fail("number out of range");
    if (r.ec != std::errc() || r.ptr != t_.data() + i_) fail("bad number");
    return v;
  }

  std::string string(bool keep) {
    if (i_ >= t_.size() || t_[i_] != '"') fail("string expected");
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= t_.size()) fail("unterminated string");
      const char c = t_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        if (keep) out += c;
        continue;
      }
      if (i_ >= t_.size()) fail("unterminated escape");
      const char e = t_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > t_.size()) fail("short \\u escape");
          unsigned long cp = 0;  // from_chars: exactly four hex digits, no sign, space or 0x
          const auto r = std::from_chars(t_.data() + i_, t_.data() + i_ + 4, cp, 16);
          if (r.ec != std::errc() || r.ptr != t_.data() + i_ + 4) fail("bad \\u escape");
          i_ += 4;
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  std::string_view t_;
  std::initializer_list<std::string_view> skip_;
  size_t i_ = 0;
};

}  // namespace

const Value* Value::get(std::string_view key) const {
  if (kind != object) return nullptr;
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

Value parse(std::string_view text, std::initializer_list<std::string_view> skip) { return Parser(text, skip).document(); }

}  // namespace accio::base::json
