"""response_format json_schema over the JSON-Schema-Test-Suite (Debian's json-schema-test-suite: every distinct schema
of drafts 4, 6 and 7 and their format tests): each schema either gives outputs that validate (checked by the
`jsonschema` package, an independent validator, with its format checker) or a 400 that names what would not be
enforced; never a 200 with a constraint dropped, never a 500. Also json_object, GBNF grammars and their errors."""
import concurrent.futures
import json
import pathlib
import re

import jsonschema
import pytest

from test_server import Server

SUITE = pathlib.Path("/usr/share/json-schema-test-suite/tests")


def suite_schemas():
    assert SUITE.is_dir(), "json-schema-test-suite is missing: bash scripts/setup_tests.sh"
    seen, out = set(), []
    for draft in ("draft4", "draft6", "draft7"):
        for f in sorted((SUITE / draft).glob("**/*.json")):
            for group in json.loads(f.read_text()):
                key = json.dumps(group["schema"], sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append((f"{draft}/{f.stem}: {group['description']}", group["schema"], draft))
    return out


def generated_schemas(n=160, seed=7):
    """Schemas as APIs and pydantic models write them: nested objects with required subsets and closed
    properties, arrays with bounds, enums, formats, patterns, numeric ranges, nullable fields, shared $defs."""
    import random
    rng = random.Random(seed)
    words = ["id", "name", "email", "tags", "price", "count", "created", "owner", "status", "items", "note", "url"]

    def value(depth):
        k = rng.randrange(9 if depth < 2 else 6)
        if k == 0:
            return {"type": "string", "maxLength": rng.choice([8, 16, 32])}
        if k == 1:
            return {"type": "string", "enum": rng.sample(["red", "green", "blue", "cyan", "black"], 3)}
        if k == 2:
            return {"type": "string", "format": rng.choice(["date", "email", "uuid", "date-time", "ipv4"])}
        if k == 3:
            lo = rng.randrange(-50, 50)
            return {"type": "integer", "minimum": lo, "maximum": lo + rng.randrange(1, 500)}
        if k == 4:
            return {"type": "number", "exclusiveMinimum": 0, "maximum": 1000}
        if k == 5:
            return {"type": "boolean"} if rng.random() < 0.5 else {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}
        if k == 6:
            return {"type": "array", "items": value(depth + 1), "minItems": rng.randrange(2),
                    "maxItems": rng.randrange(2, 5)}
        if k == 7:
            return {"anyOf": [value(depth + 1), {"type": "null"}]}
        return obj(depth + 1)

    def obj(depth):
        props = {w: value(depth) for w in rng.sample(words, rng.randrange(1, 5))}
        req = [w for w in props if rng.random() < 0.7]
        return {"type": "object", "properties": props, "required": req, "additionalProperties": False}

    out = []
    for i in range(n):
        s = obj(0)
        if i % 4 == 0:  # a shared definition, referenced twice
            s = {"$defs": {"thing": obj(1)}, "type": "object",
                 "properties": {"a": {"$ref": "#/$defs/thing"}, "b": {"type": "array", "items": {"$ref": "#/$defs/thing"},
                                                                    "maxItems": 2}},
                 "required": ["a"], "additionalProperties": False}
        out.append((f"generated/{i}", s, "draft2020"))
    return out


@pytest.fixture(scope="module")
def server(cachet_bin, default_model):
    # An f32 KV cache: what is measured here is the grammar, not the attention's rounding. With f16 K/V the
    # AVX-512 tables' greedy completions ran into max_tokens 67 times of 319 (as q8_0 K/V does on every table),
    # the AVX2 table's 26 (f32 K/V: 30 on AVX-512), which moved the counts below past their floors on one CPU.
    s = Server(cachet_bin, default_model, "--parallel", "8", "--kv-type", "f32")
    yield s
    s.stop()


VALIDATORS = {"draft4": jsonschema.Draft4Validator, "draft6": jsonschema.Draft6Validator,
              "draft7": jsonschema.Draft7Validator, "draft2020": jsonschema.Draft202012Validator}


def run_schema(server, item):
    name, schema, draft = item
    st, body, _ = server.request("POST", "/v1/completions", {
        "prompt": "A JSON value:", "max_tokens": 192, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})
    if st == 400:
        return name, "refused", json.loads(body)["error"]["message"]
    assert st == 200, (name, st, body)
    ch = json.loads(body)["choices"][0]
    if ch["finish_reason"] == "length":
        return name, "cut", ch["text"]
    value = json.loads(ch["text"])
    v = VALIDATORS[draft](schema, format_checker=VALIDATORS[draft].FORMAT_CHECKER)
    errors = [e.message for e in v.iter_errors(value)]
    return name, "invalid" if errors else "valid", (ch["text"], errors)


def test_json_schema_test_suite_and_generated_schemas(server):
    items = suite_schemas() + generated_schemas()
    assert len(items) > 250
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda it: run_schema(server, it), items))
    by = {}
    for name, kind, detail in results:
        by.setdefault(kind, []).append((name, detail))
    invalid = by.get("invalid", [])
    assert not invalid, "\n".join(f"{n}: {d}" for n, d in invalid)
    # A refusal names the keyword (with its JSON pointer) or says why the schema cannot be compiled.
    for name, msg in by.get("refused", []):
        assert re.search(r"JSON schema at '#|not valid JSON|invalid JSON schema|structural tag|would not be enforced|"
                         r"accepts nothing|no common|cannot|unsatisfiable|Unsatisfiable", msg), (name, msg)
    print({k: len(v) for k, v in by.items()})
    assert len(by.get("valid", [])) >= 200
    assert len(by.get("cut", [])) <= len(items) // 10


def test_unsupported_keywords_are_named(server):
    for schema, word in [({"type": "array", "uniqueItems": True}, "uniqueItems"),
                         ({"type": "object", "properties": {"a": {"not": {}}}}, "#/properties/a/not"),
                         ({"if": {"type": "string"}, "then": {"minLength": 2}}, "'if'"),
                         ({"$ref": "http://json-schema.org/draft-07/schema#"}, "local"),
                         ({"type": "string", "format": "regex"}, '"regex"'),
                         ({"type": "number", "multipleOf": 0.25}, "multipleOf")]:
        st, body, _ = server.request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})
        assert st == 400, (schema, body)
        e = json.loads(body)["error"]
        assert e["param"] == "response_format" and word in e["message"], (schema, e)


def test_json_object_and_grammars(server):
    st, body, _ = server.request("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Describe a cat as JSON."}], "max_tokens": 200, "temperature": 0,
        "response_format": {"type": "json_object"}})
    assert st == 200
    ch = json.loads(body)["choices"][0]
    if ch["finish_reason"] == "stop":
        assert isinstance(json.loads(ch["message"]["content"]), dict)
    st, body, _ = server.request("POST", "/v1/completions", {
        "prompt": "Answer:", "max_tokens": 20, "temperature": 0.9, "seed": 4,
        "grammar": 'root ::= ("yes" | "no") ", " [0-9]{1,3} " apples"'})
    assert st == 200
    assert re.fullmatch(r"(yes|no), [0-9]{1,3} apples", json.loads(body)["choices"][0]["text"])
    # llama-server's top-level json_schema field.
    st, body, _ = server.request("POST", "/v1/completions", {
        "prompt": "Answer:", "max_tokens": 30, "temperature": 0,
        "json_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                        "additionalProperties": False}})
    assert st == 200
    assert json.loads(json.loads(body)["choices"][0]["text"]).keys() == {"ok"}
    st, body, _ = server.request("POST", "/v1/completions", {"prompt": "x", "grammar": "root ::= undefined_rule"})
    assert st == 400 and json.loads(body)["error"]["param"] == "grammar"
    st, body, _ = server.request("POST", "/v1/completions", {
        "prompt": "x", "grammar": 'root ::= "a"', "response_format": {"type": "json_object"}})
    assert st == 400
