#include "grammar/schema_check.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

namespace cachet {

namespace {

using json = nlohmann::ordered_json;  // property order is the order the grammar asks for

constexpr int kMaxDepth = 64;

// Keywords that only describe: the grammar has nothing to enforce.
const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title", "description", "default", "examples", "$comment", "$schema",
                                          "$id", "$anchor", "deprecated", "readOnly", "writeOnly",
                                          "contentEncoding", "contentMediaType"};
  return k;
}

// Keywords the grammar enforces (XGrammar's JSON Schema converter, with the checks below).
const std::set<std::string>& enforced() {
  static const std::set<std::string> k = {
      "type", "enum", "const", "$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf",
      // objects
      "properties", "required", "additionalProperties", "minProperties", "maxProperties",
      // arrays
      "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
      // strings
      "minLength", "maxLength", "pattern", "format",
      // numbers
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
  return k;
}

const std::set<std::string>& formats() {
  static const std::set<std::string> k = {"date", "date-time", "time", "duration", "email", "hostname", "ipv4",
                                          "ipv6", "uri", "uri-reference", "uri-template", "uuid", "json-pointer",
                                          "relative-json-pointer"};
  return k;
}

// RFC 3339 full-date, exactly: 30/31-day months, February 28, and 29 in leap years (divisible by 4, centuries
// only when divisible by 400).
std::string date_regex() {
  const std::string y = "[0-9]{4}";
  const std::string leap = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)";
  return "(" + y + "-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|" + y + "-(0[469]|11)-(0[1-9]|[12][0-9]|30)|" + y +
         "-02-(0[1-9]|1[0-9]|2[0-8])|" + leap + "-02-29)";
}

// RFC 3339 full-time: hours 00-23, minutes 00-59, seconds 00-60 (a leap second), fraction, Z or an offset.
std::string time_regex() {
  return "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
}

std::string escape_pointer(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

Status refuse(const std::string& ptr, const std::string& why) {
  return invalid_argument("JSON schema at '" + (ptr.empty() ? std::string("#") : "#" + ptr) + "': " + why);
}

std::vector<std::string> type_list(const json& t) {
  std::vector<std::string> out;
  if (t.is_string()) out.push_back(t.get<std::string>());
  else if (t.is_array())
    for (const json& x : t)
      if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

// A sufficient test that no value satisfies both branches (schemas already checked): their types do not
// overlap, their const/enum values do not, or one requires a property the other forbids or pins to other values.
std::vector<std::string> types_of(const json& s) {
  if (s.is_object() && s.contains("type")) return type_list(s["type"]);
  return {};
}

std::optional<std::vector<json>> values_of(const json& s) {
  if (!s.is_object()) return std::nullopt;
  if (s.contains("const")) return std::vector<json>{s["const"]};
  if (s.contains("enum")) return std::vector<json>(s["enum"].begin(), s["enum"].end());
  return std::nullopt;
}

bool disjoint(const json& a, const json& b) {
  if (!a.is_object() || !b.is_object()) return false;
  const std::vector<std::string> ta = types_of(a), tb = types_of(b);
  if (!ta.empty() && !tb.empty()) {
    bool overlap = false;
    for (const std::string& x : ta)
      for (const std::string& y : tb)
        overlap = overlap || x == y || (x == "integer" && y == "number") || (x == "number" && y == "integer");
    if (!overlap) return true;
  }
  const auto va = values_of(a), vb = values_of(b);
  if (va && vb) {
    bool common = false;
    for (const json& x : *va) common = common || std::find(vb->begin(), vb->end(), x) != vb->end();
    if (!common) return true;
  }
  // Objects: a property one requires that the other cannot have, or pins to values the other's pin excludes.
  auto one_way = [](const json& x, const json& y) {
    if (!x.contains("required") || !x["required"].is_array()) return false;
    const bool y_closed = y.contains("additionalProperties") && y["additionalProperties"] == json(false) &&
                          !y.contains("patternProperties");
    for (const json& r : x["required"]) {
      const std::string k = r.get<std::string>();
      const bool y_has = y.contains("properties") && y["properties"].contains(k);
      if (y_closed && !y_has) return true;
      if (y_has && x.contains("properties") && x["properties"].contains(k) && y.contains("required") &&
          std::find(y["required"].begin(), y["required"].end(), r) != y["required"].end()) {
        const auto vx = values_of(x["properties"][k]), vy = values_of(y["properties"][k]);
        if (vx && vy) {
          bool common = false;
          for (const json& v : *vx) common = common || std::find(vy->begin(), vy->end(), v) != vy->end();
          if (!common) return true;
        }
      }
    }
    return false;
  };
  return one_way(a, b) || one_way(b, a);
}

class Checker {
 public:
  explicit Checker(const json& root) : root_(root) {}

  Status walk(json& s, const std::string& ptr, int depth) {
    if (depth > kMaxDepth) return refuse(ptr, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (s.is_boolean()) return Status::ok();
    if (!s.is_object()) return refuse(ptr, "a schema must be an object or a boolean");
    CACHET_RETURN_IF_ERROR(fold_siblings(s, ptr));
    if (s.contains("allOf")) CACHET_RETURN_IF_ERROR(merge_all_of(s, ptr, depth));
    // oneOf whose branches are provably disjoint is anyOf (at most one branch can match anyway); the grammar
    // enforces anyOf exactly.
    bool one_of_to_any_of = false;
    std::string calendar_format;  // "date" or "date-time": replaced by an exact pattern
    for (auto& [k, v] : s.items()) {
      const std::string at = ptr + "/" + escape_pointer(k);
      if (annotations().count(k)) continue;
      if (!enforced().count(k))
        return refuse(at, "keyword '" + k + "' is not supported by constrained decoding (it would not be enforced)");
      if (k == "type") {
        for (const std::string& t : type_list(v))
          if (t != "string" && t != "number" && t != "integer" && t != "boolean" && t != "null" && t != "object" &&
              t != "array")
            return refuse(at, "unknown type '" + t + "'");
        if (type_list(v).empty()) return refuse(at, "'type' must be a type name or a non-empty array of them");
      } else if (k == "$ref") {
        if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>()[0] != '#')
          return refuse(at, "only local references ('#/...') are supported");
        CACHET_RETURN_IF_ERROR(resolve(v.get<std::string>(), at).status());
      } else if (k == "uniqueItems") {
        if (!v.is_boolean()) return refuse(at, "'uniqueItems' must be a boolean");
        if (v.get<bool>()) return refuse(at, "keyword 'uniqueItems' is not supported by constrained decoding");
      } else if (k == "format") {
        if (!v.is_string() || !formats().count(v.get<std::string>()))
          return refuse(at, "format " + v.dump() + " is not supported by constrained decoding");
        if (v == "date" || v == "date-time") {
          if (s.contains("pattern")) return refuse(at, "'format' " + v.dump() + " with a 'pattern' is not supported");
          calendar_format = v.get<std::string>();
        }
      } else if (k == "items") {
        if (v.is_array()) return refuse(at, "'items' as an array is not supported: use 'prefixItems'");
        CACHET_RETURN_IF_ERROR(walk(v, at, depth + 1));
      } else if (k == "exclusiveMinimum" || k == "exclusiveMaximum" || k == "minimum" || k == "maximum" ||
                 k == "multipleOf") {
        if (!v.is_number()) return refuse(at, "'" + k + "' must be a number");
      } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" ||
                 k == "minProperties" || k == "maxProperties") {
        if (!v.is_number_integer() || v.get<int64_t>() < 0) return refuse(at, "'" + k + "' must be an integer >= 0");
      } else if (k == "properties" || k == "patternProperties" || k == "$defs" || k == "definitions") {
        if (!v.is_object()) return refuse(at, "'" + k + "' must be an object");
        for (auto& [name, sub] : v.items()) CACHET_RETURN_IF_ERROR(walk(sub, at + "/" + escape_pointer(name), depth + 1));
      } else if (k == "anyOf" || k == "oneOf" || k == "prefixItems") {
        if (!v.is_array() || v.empty()) return refuse(at, "'" + k + "' must be a non-empty array");
        for (size_t i = 0; i < v.size(); ++i) CACHET_RETURN_IF_ERROR(walk(v[i], at + "/" + std::to_string(i), depth + 1));
        if (k == "oneOf") {
          bool all_disjoint = true;
          for (size_t i = 0; i < v.size() && all_disjoint; ++i)
            for (size_t j = i + 1; j < v.size() && all_disjoint; ++j) all_disjoint = disjoint(v[i], v[j]);
          if (all_disjoint) one_of_to_any_of = true;
        }
      } else if (k == "additionalProperties" || k == "propertyNames") {
        CACHET_RETURN_IF_ERROR(walk(v, at, depth + 1));
      } else if (k == "required") {
        if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); }))
          return refuse(at, "'required' must be an array of strings");
      } else if (k == "enum") {
        if (!v.is_array() || v.empty()) return refuse(at, "'enum' must be a non-empty array");
      }
    }
    // The grammar enforces a string's 'pattern' or 'format' and would drop a length bound beside it.
    if ((s.contains("pattern") || s.contains("format")) &&
        (s.contains("maxLength") || s.value("minLength", int64_t{0}) > 0))
      return refuse(ptr + (s.contains("maxLength") ? "/maxLength" : "/minLength"),
                    "a length bound beside 'pattern' or 'format' is not supported by constrained decoding (it would "
                    "not be enforced): write the length into the pattern");
    if (!calendar_format.empty()) {
      // Dates as the calendar has them (days per month, February 29 in leap years only): the grammar's own
      // format allows 2023-02-31.
      s.erase("format");
      s["pattern"] = calendar_format == "date" ? "^" + date_regex() + "$"
                                               : "^" + date_regex() + "[Tt]" + time_regex() + "$";
    }
    if (one_of_to_any_of && !s.contains("anyOf")) {
      s["anyOf"] = s["oneOf"];
      s.erase("oneOf");
    }
    return Status::ok();
  }

 private:
  const json& root_;

  // The grammar reads one of $ref, const, enum, anyOf, oneOf and ignores what stands beside it: siblings are
  // folded in (into every branch, or an allOf with the reference), and enum values are kept only where the
  // sibling type allows them.
  Status fold_siblings(json& s, const std::string& ptr) {
    if (!s.is_object()) return Status::ok();
    auto constraining = [&](const json& x) {
      std::vector<std::string> keys;
      for (auto it = x.begin(); it != x.end(); ++it)
        if (!annotations().count(it.key()) && it.key() != "$defs" && it.key() != "definitions") keys.push_back(it.key());
      return keys;
    };
    const std::vector<std::string> keys = constraining(s);
    auto siblings_of = [&](const char* kw) {
      json sib = json::object();
      for (const std::string& k : keys)
        if (k != kw) sib[k] = s[k];
      return sib;
    };
    if (s.contains("$ref") && keys.size() > 1) {
      json sib = siblings_of("$ref");
      for (auto it = sib.begin(); it != sib.end(); ++it) s.erase(it.key());
      json ref = {{"$ref", s["$ref"]}};
      s.erase("$ref");
      json all = s.contains("allOf") ? s["allOf"] : json::array();
      all.push_back(ref);
      all.push_back(sib);
      s["allOf"] = all;
      return Status::ok();
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw) || keys.size() == 1 || !s[kw].is_array()) continue;
      json sib = siblings_of(kw);
      sib.erase(kw == std::string("anyOf") ? "oneOf" : "anyOf");
      if (sib.empty()) continue;
      if (s.contains("anyOf") && s.contains("oneOf"))
        return refuse(ptr, "'anyOf' beside 'oneOf' is not supported");
      for (json& branch : s[kw]) branch = json{{"allOf", json::array({sib, branch})}};
      for (auto it = sib.begin(); it != sib.end(); ++it) s.erase(it.key());
      return Status::ok();
    }
    for (const char* kw : {"enum", "const"}) {
      if (!s.contains(kw) || keys.size() == 1) continue;
      for (const std::string& k : keys)
        if (k != kw && k != "type" && k != "enum" && k != "const")
          return refuse(ptr + "/" + k, "'" + k + "' beside '" + kw + "' is not supported");
      if (!s.contains("type")) continue;
      const std::vector<std::string> types = type_list(s["type"]);
      auto fits = [&](const json& v) {
        for (const std::string& t : types)
          if ((t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
              (t == "integer" && v.is_number_float() && v.get<double>() == static_cast<int64_t>(v.get<double>())) ||
              (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
              (t == "object" && v.is_object()) || (t == "array" && v.is_array()))
            return true;
        return false;
      };
      json values = kw == std::string("enum") ? s["enum"] : json::array({s["const"]});
      json keep = json::array();
      if (values.is_array())
        for (const json& v : values)
          if (fits(v)) keep.push_back(v);
      if (keep.empty()) return refuse(ptr, "no value of '" + std::string(kw) + "' has the schema's type");
      s.erase("const");
      s["enum"] = keep;
      s.erase("type");
    }
    return Status::ok();
  }

  Result<json> resolve(const std::string& ref, const std::string& at) const {
    if (ref == "#") return root_;
    try {
      const json::json_pointer p(ref.substr(1));
      if (!root_.contains(p)) return refuse(at, "reference '" + ref + "' points nowhere");
      return root_.at(p);
    } catch (const json::exception&) {
      return refuse(at, "reference '" + ref + "' is not a JSON pointer");
    }
  }

  // allOf: the branches merged into the schema that holds them (each branch checked first, its own allOf
  // merged, a branch that is only a $ref replaced by its target).
  Status merge_all_of(json& s, const std::string& ptr, int depth) {
    const std::string at = ptr + "/allOf";
    json branches = s["allOf"];
    s.erase("allOf");
    if (!branches.is_array() || branches.empty()) return refuse(at, "'allOf' must be a non-empty array");
    std::vector<std::set<std::string>> closed;  // property sets of branches with additionalProperties: false
    for (size_t i = 0; i < branches.size(); ++i) {
      json b = branches[i];
      const std::string bat = at + "/" + std::to_string(i);
      for (int hops = 0; b.is_object() && b.size() == 1 && b.contains("$ref"); ++hops) {
        if (hops > kMaxDepth || !b["$ref"].is_string()) return refuse(bat, "a reference cycle inside 'allOf'");
        CACHET_ASSIGN_OR_RETURN(b, resolve(b["$ref"].get<std::string>(), bat));
      }
      CACHET_RETURN_IF_ERROR(walk(b, bat, depth + 1));
      if (b.is_boolean()) {
        if (!b.get<bool>()) return refuse(bat, "'allOf' with a false branch accepts nothing");
        continue;
      }
      if (b.contains("additionalProperties") && b["additionalProperties"] == json(false)) {
        if (b.contains("patternProperties"))
          return refuse(bat, "'allOf' branch closing its properties with 'patternProperties' is not supported");
        std::set<std::string> keys;
        if (b.contains("properties") && b["properties"].is_object())
          for (auto& [name, x] : b["properties"].items()) keys.insert(name);
        closed.push_back(std::move(keys));
      }
      CACHET_RETURN_IF_ERROR(merge(s, b, bat, depth));
    }
    // A branch that allows only its own properties removes the others' (and cannot require them).
    for (const std::set<std::string>& keys : closed) {
      if (s.contains("properties"))
        for (auto it = s["properties"].begin(); it != s["properties"].end();) {
          if (keys.count(it.key())) { ++it; continue; }
          it = s["properties"].erase(it);
        }
      if (s.contains("required"))
        for (const json& r : s["required"])
          if (!keys.count(r.get<std::string>()))
            return refuse(at, "'allOf' requires '" + r.get<std::string>() + "', which another branch forbids");
    }
    return Status::ok();
  }

  Status merge(json& a, const json& b, const std::string& at, int depth) {
    for (auto& [k, v] : b.items()) {
      if (!a.contains(k)) {
        a[k] = v;
        continue;
      }
      json& x = a[k];
      if (annotations().count(k) || x == v) continue;
      if (k == "properties") {
        for (auto& [name, sub] : v.items()) {
          if (!x.contains(name)) {
            x[name] = sub;
            continue;
          }
          json both = {{"allOf", json::array({x[name], sub})}};
          CACHET_RETURN_IF_ERROR(walk(both, at + "/properties/" + escape_pointer(name), depth + 1));
          x[name] = std::move(both);
        }
      } else if (k == "required") {
        for (const json& r : v)
          if (std::find(x.begin(), x.end(), r) == x.end()) x.push_back(r);
      } else if (k == "type") {
        std::vector<std::string> keep;
        const std::vector<std::string> tb = type_list(v);
        for (const std::string& t : type_list(x)) {
          const bool in_b = std::find(tb.begin(), tb.end(), t) != tb.end();
          if (in_b) keep.push_back(t);
          else if (t == "integer" && std::find(tb.begin(), tb.end(), "number") != tb.end()) keep.push_back(t);
          else if (t == "number" && std::find(tb.begin(), tb.end(), "integer") != tb.end()) keep.push_back("integer");
        }
        if (keep.empty()) return refuse(at, "'allOf' branches allow no common type");
        x = keep.size() == 1 ? json(keep[0]) : json(keep);
      } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems" ||
                 k == "minProperties") {
        if (v.is_number() && x.is_number() && v.get<double>() > x.get<double>()) x = v;
      } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems" ||
                 k == "maxProperties") {
        if (v.is_number() && x.is_number() && v.get<double>() < x.get<double>()) x = v;
      } else if (k == "enum") {
        json keep = json::array();
        for (const json& e : x)
          if (std::find(v.begin(), v.end(), e) != v.end()) keep.push_back(e);
        if (keep.empty()) return refuse(at, "'allOf' branches' enums have no common value");
        x = std::move(keep);
      } else if (k == "additionalProperties" || k == "items" || k == "propertyNames") {
        if (x == json(false) || v == json(false)) { x = false; continue; }
        if (x == json(true)) { x = v; continue; }
        if (v == json(true)) continue;
        json both = {{"allOf", json::array({x, v})}};
        CACHET_RETURN_IF_ERROR(walk(both, at + "/" + k, depth + 1));
        x = std::move(both);
      } else {
        return refuse(at, "'allOf' branches with different '" + k + "' are not supported");
      }
    }
    return Status::ok();
  }
};

}  // namespace

Result<json> check_json_schema(const json& schema) {
  json s = schema;
  Checker c(schema);
  CACHET_RETURN_IF_ERROR(c.walk(s, "", 0));
  return s;
}

Result<std::string> check_json_schema(const std::string& schema_text) {
  json schema;
  try {
    schema = json::parse(schema_text);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("JSON schema is not valid JSON: ") + e.what());
  }
  CACHET_ASSIGN_OR_RETURN(json s, check_json_schema(schema));
  return s.dump();
}

}  // namespace cachet
