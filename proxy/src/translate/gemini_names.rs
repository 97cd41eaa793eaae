//! The Gemini API's two spellings of a field (`systemInstruction` in JSON, `system_instruction`
//! in its protos; the API takes both) and its schemas' upper-case types (`OBJECT`), brought to
//! the JSON spelling and to JSON Schema.

use serde_json::Value;

/// The JSON spelling of a proto field name (`system_instruction` → `systemInstruction`).
fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut up = false;
    for c in key.chars() {
        match c {
            '_' => up = true,
            c if up => {
                out.extend(c.to_uppercase());
                up = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// A copy of `v` with every object key in its JSON spelling (schemas are left as they are).
pub(super) fn normalised(v: &Value, inside_schema: bool) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let key = if inside_schema { k.clone() } else { camel(k) };
                    let schema = inside_schema || SCHEMA_KEYS.contains(&key.as_str());
                    (key, normalised(v, schema))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| normalised(v, inside_schema)).collect()),
        other => other.clone(),
    }
}

/// Whether some key outside a schema is in the proto spelling (`system_instruction`).
pub(super) fn proto_spelled(v: &Value, inside_schema: bool) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| {
            (!inside_schema && k.contains('_')) || proto_spelled(v, inside_schema || SCHEMA_KEYS.contains(&k.as_str()))
        }),
        Value::Array(a) => a.iter().any(|v| proto_spelled(v, inside_schema)),
        _ => false,
    }
}

/// Keys whose values are schemas or free JSON, left as they are.
const SCHEMA_KEYS: &[&str] =
    &["parameters", "parametersJsonSchema", "responseSchema", "responseJsonSchema", "args", "response"];

/// A Gemini schema's types are upper case (`OBJECT`); JSON Schema's are lower case.
pub(super) fn json_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("type", Value::String(t)) => (k.clone(), Value::String(t.to_lowercase())),
                    _ => (k.clone(), json_schema(v)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(json_schema).collect()),
        other => other.clone(),
    }
}
