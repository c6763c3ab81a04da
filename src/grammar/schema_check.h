// What a JSON Schema asks that constrained decoding can enforce (docs/structured-output.md). Every keyword is
// either enforced by the grammar, an annotation (title, description, default, examples, ...), or refused by
// name: a request never gets a 200 with a constraint silently dropped. allOf is merged here into one schema
// (properties, required, bounds, types and enums intersected), since the grammar takes one schema per value.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cachet/status.h"

namespace cachet {

// The schema (JSON text) ready for the grammar compiler, or InvalidArgument naming the first keyword (with its
// JSON pointer) that would not be enforced, or why the schema cannot be satisfied.
Result<std::string> check_json_schema(const std::string& schema_text);
Result<nlohmann::ordered_json> check_json_schema(const nlohmann::ordered_json& schema);

}  // namespace cachet
