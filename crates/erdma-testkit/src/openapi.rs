//! A strict check of request bodies against an OpenAPI v3 document of the Kubernetes API, for the
//! stand-in API servers of the tests: what the real API server refuses when it decodes a body with
//! `fieldValidation=Strict` (or refuses in validation for a missing required field), a test
//! refuses too, with the path of each violation.
//!
//! The document is the one the API server publishes for a group version at
//! `/openapi/v3/apis/GROUP/VERSION` (`testdata/k8s/openapi-v3/` holds `resource.k8s.io/v1`'s; its
//! README says where it comes from). Only `components.schemas` is read.
//!
//! [`Schema::validate`] checks: unknown fields (a schema with `properties` and no
//! `additionalProperties`), `additionalProperties` schemas for the values of a map, `required`,
//! `type`, `items`, `allOf` and `$ref`, `enum`, the ranges of `format: int32` and `int64`,
//! `format: date-time` (RFC 3339, as `metav1.Time` parses it), `x-kubernetes-int-or-string`,
//! `x-kubernetes-preserve-unknown-fields` (anything goes), Kubernetes' quantity syntax for
//! `io.k8s.apimachinery.pkg.api.resource.Quantity`, and the top object's `apiVersion` and `kind`
//! against the schema's `x-kubernetes-group-version-kind`.
//!
//! It does not check what the document does not say or only says in prose: CEL rules and
//! `x-kubernetes-validations`, name and label syntax, lengths and counts ("must not have more
//! than 128 entries"), one-of rules ("exactly one field must be set"), uniqueness in
//! `x-kubernetes-list-type: map` or `set` lists, immutable fields, server-side defaulting, or
//! whether an alpha field's feature gate is on. Duplicate keys, which strict decoding refuses,
//! cannot be seen: a [`serde_json::Value`] keeps the last one.

use std::path::Path;

use serde_json::{Map, Value};

/// Where a `$ref` of the document points: its own `components.schemas`.
const REF_PREFIX: &str = "#/components/schemas/";

/// The quantity type, checked by its syntax: the document gives it as `oneOf` string or number
/// and describes the syntax in prose only.
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// How many `$ref`s may be followed at one place of a value before the document is taken to
/// loop (Kubernetes' documents nest a `$ref` in an `allOf` once, so one or two are the norm).
const MAX_REF_HOPS: u32 = 32;

/// An OpenAPI v3 document of the Kubernetes API (`components.schemas`).
#[derive(Debug, Clone)]
pub struct Schema {
    /// `components.schemas`, by name (`io.k8s.api.resource.v1.ResourceSlice`); every `$ref` in it
    /// resolves ([`Schema::from_value`] checks).
    schemas: Map<String, Value>,
}

impl Schema {
    /// Reads the document at `path` (JSON, as `/openapi/v3/...` serves it).
    pub fn load(path: &Path) -> Result<Schema, String> {
        let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let doc = serde_json::from_slice(&text)
            .map_err(|e| format!("parsing {}: {e}", path.display()))?;
        Schema::from_value(doc).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The document's `components.schemas`; an error when there is none or a `$ref` in it points
    /// to no schema of the document.
    pub fn from_value(doc: Value) -> Result<Schema, String> {
        let Value::Object(mut doc) = doc else {
            return Err("not an OpenAPI document: not a JSON object".into());
        };
        let Some(Value::Object(mut components)) = doc.remove("components") else {
            return Err("not an OpenAPI v3 document: no `components` object".into());
        };
        let Some(Value::Object(schemas)) = components.remove("schemas") else {
            return Err("no `components.schemas` object".into());
        };
        for (name, schema) in &schemas {
            let mut refs = Vec::new();
            collect_refs(schema, &mut refs);
            for r in refs {
                let target = r.as_str().and_then(|r| r.strip_prefix(REF_PREFIX));
                if !target.is_some_and(|t| schemas.contains_key(t)) {
                    return Err(format!("schema {name}: $ref {r} points to no schema here"));
                }
            }
        }
        Ok(Schema { schemas })
    }

    /// The schema name for a kind, from `x-kubernetes-group-version-kind` (e.g.
    /// ("resource.k8s.io","v1","ResourceSlice") -> "io.k8s.api.resource.v1.ResourceSlice").
    /// The core group is `""`.
    pub fn for_kind(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.schemas
            .iter()
            .find(|(_, s)| gvks(s).iter().any(|&(g, v, k)| (g, v, k) == (group, version, kind)))
            .map(|(name, _)| name.as_str())
    }

    /// Every violation in `value` against schema `name`, each as "path: what" (e.g.
    /// `"spec.devices[0].attributes.mtu.int: expected integer, got string"`), empty when valid.
    ///
    /// Paths join field names with `.`, array indices as `[0]`, and map keys that are not plain
    /// names (`erdma.aliyun.com/mtu`) as `["erdma.aliyun.com/mtu"]`; the top object is `(root)`.
    /// `null` is accepted for an optional field, as the API server's decoding leaves the field
    /// unset; for a required field it counts as missing, and anywhere else (an array item, a map
    /// value) it is a type violation.
    pub fn validate(&self, name: &str, value: &Value) -> Vec<String> {
        let mut out = Vec::new();
        let Some(schema) = self.schemas.get(name) else {
            out.push(format!("{}: no schema {name:?} in the document", show("")));
            return out;
        };
        if name == QUANTITY {
            check_quantity(value, "", &mut out);
            return out;
        }
        check_gvk(schema, value, &mut out);
        self.check(schema, value, "", 0, &mut out);
        out
    }

    /// Checks `value` at `path` against `schema`, appending violations to `out`. `hops` counts the
    /// `$ref`s followed at this place of the value.
    fn check(&self, schema: &Value, value: &Value, path: &str, hops: u32, out: &mut Vec<String>) {
        // `true` or `{}` accepts anything; Kubernetes' documents use no other boolean schema.
        let Value::Object(s) = schema else { return };
        if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            return;
        }
        if let Some(r) = s.get("$ref") {
            self.check_ref(r, value, path, hops, out);
        }
        if let Some(Value::Array(all)) = s.get("allOf") {
            for sub in all {
                self.check(sub, value, path, hops, out);
            }
        }
        if s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            if !(is_integer(value) || value.is_string()) {
                out.push(format!(
                    "{}: expected integer or string, got {}",
                    show(path),
                    kind(value)
                ));
            }
            return;
        }
        if let Some(Value::Array(options)) = s.get("enum") {
            if !options.contains(value) {
                out.push(format!(
                    "{}: {value} is not one of {}",
                    show(path),
                    Value::from(options.clone())
                ));
            }
        }
        let expected = s.get("type").and_then(Value::as_str);
        let fits = match expected {
            Some("object") => value.is_object(),
            Some("array") => value.is_array(),
            Some("string") => value.is_string(),
            Some("integer") => is_integer(value),
            Some("number") => value.is_number(),
            Some("boolean") => value.is_boolean(),
            // No type: an object's schema when it lists fields, else unconstrained here.
            _ => value.is_object() || !(s.contains_key("properties")),
        };
        if !fits {
            let expected = expected.unwrap_or("object");
            out.push(format!("{}: expected {expected}, got {}", show(path), kind(value)));
            return;
        }
        match value {
            Value::Object(obj) => self.check_object(s, obj, path, out),
            Value::Array(items) => {
                if let Some(item_schema) = s.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.check(item_schema, item, &format!("{path}[{i}]"), 0, out);
                    }
                }
            }
            _ => check_format(s.get("format").and_then(Value::as_str), value, path, out),
        }
    }

    /// Follows a `$ref`: the quantity type by its syntax, any other schema by [`Schema::check`].
    fn check_ref(&self, r: &Value, value: &Value, path: &str, hops: u32, out: &mut Vec<String>) {
        let Some(name) = r.as_str().and_then(|r| r.strip_prefix(REF_PREFIX)) else {
            out.push(format!("{}: schema $ref {r} is not a local schema", show(path)));
            return;
        };
        if name == QUANTITY {
            check_quantity(value, path, out);
            return;
        }
        if hops >= MAX_REF_HOPS {
            out.push(format!("{}: schema $ref {name} loops", show(path)));
            return;
        }
        match self.schemas.get(name) {
            Some(target) => self.check(target, value, path, hops + 1, out),
            None => out.push(format!("{}: schema $ref {name} points to no schema", show(path))),
        }
    }

    /// An object's fields: known ones by their schema, the others by `additionalProperties` or as
    /// unknown, then the required ones.
    fn check_object(
        &self,
        s: &Map<String, Value>,
        obj: &Map<String, Value>,
        path: &str,
        out: &mut Vec<String>,
    ) {
        let properties = s.get("properties").and_then(Value::as_object);
        let additional = s.get("additionalProperties");
        for (key, v) in obj {
            let child = join(path, key);
            if let Some(field) = properties.and_then(|p| p.get(key)) {
                // `null` leaves an optional field unset; a required one is reported below.
                if !v.is_null() {
                    self.check(field, v, &child, 0, out);
                }
                continue;
            }
            match additional {
                Some(Value::Bool(true)) => {}
                Some(Value::Bool(false)) => out.push(format!("{child}: unknown field")),
                Some(values @ Value::Object(_)) => self.check(values, v, &child, 0, out),
                // Without `properties` either, the object is free-form (FieldsV1, RawExtension).
                _ if properties.is_some() => out.push(format!("{child}: unknown field")),
                _ => {}
            }
        }
        if let Some(Value::Array(required)) = s.get("required") {
            for r in required.iter().filter_map(Value::as_str) {
                if obj.get(r).is_none_or(Value::is_null) {
                    out.push(format!("{}: missing required field", join(path, r)));
                }
            }
        }
    }
}

/// The top object's `apiVersion` and `kind` against the schema's
/// `x-kubernetes-group-version-kind`, when it has one. The API server would take a missing one
/// from the request's URL, but a client of ours always sends both, so here a missing one is a
/// violation. One that is not a string is left to the type check.
fn check_gvk(schema: &Value, value: &Value, out: &mut Vec<String>) {
    let gvks = gvks(schema);
    let Some(obj) = value.as_object() else { return };
    if gvks.is_empty() {
        return;
    }
    let api_versions: Vec<String> = gvks
        .iter()
        .map(|&(g, v, _)| if g.is_empty() { v.to_string() } else { format!("{g}/{v}") })
        .collect();
    let kinds: Vec<String> = gvks.iter().map(|&(_, _, k)| k.to_string()).collect();
    for (field, allowed) in [("apiVersion", api_versions), ("kind", kinds)] {
        let expected = if allowed.len() == 1 {
            format!("{:?}", allowed[0])
        } else {
            format!("one of {allowed:?}")
        };
        match obj.get(field) {
            None | Some(Value::Null) => out.push(format!("{field}: missing, expected {expected}")),
            Some(Value::String(got)) if !allowed.contains(got) => {
                out.push(format!("{field}: expected {expected}, got {got:?}"))
            }
            _ => {}
        }
    }
}

/// A scalar's `format`: the ranges of `int32` and `int64`, and `date-time`. Other formats are
/// not checked (Kubernetes' documents use these, and `byte` and `double` elsewhere).
fn check_format(format: Option<&str>, value: &Value, path: &str, out: &mut Vec<String>) {
    match (format, value) {
        (Some("int32"), Value::Number(n))
            if n.as_i64().is_none_or(|i| i32::try_from(i).is_err()) =>
        {
            out.push(format!("{}: {n} is out of the int32 range", show(path)));
        }
        (Some("int64"), Value::Number(n)) if n.as_i64().is_none() => {
            out.push(format!("{}: {n} is out of the int64 range", show(path)));
        }
        (Some("date-time"), Value::String(s)) if !is_rfc3339(s) => {
            out.push(format!("{}: invalid date-time {s:?} (RFC 3339)", show(path)));
        }
        _ => {}
    }
}

/// A quantity: a string in Kubernetes' quantity syntax, or a JSON number, whose text the API
/// server parses the same way (every JSON number fits the syntax). The server trims spaces
/// around the string first, as here.
fn check_quantity(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::String(s) if is_quantity(s.trim()) => {}
        Value::String(s) => out.push(format!("{}: invalid quantity {s:?}", show(path))),
        Value::Number(_) => {}
        other => out.push(format!(
            "{}: expected quantity (string or number), got {}",
            show(path),
            kind(other)
        )),
    }
}

/// Kubernetes' quantity syntax, from the grammar in the `Quantity` schema's description: a
/// signed decimal number (`1`, `1.5`, `.5`, `5.`), then nothing, a binary suffix (`Ki` .. `Ei`),
/// a decimal one (`m`, `k`, `M` .. `E`, and `n` and `u`, which the API server's parser knows
/// although the grammar leaves them out), or an exponent (`e3`, `E-2`).
fn is_quantity(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let mut digits = 0;
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
        digits += 1;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return false;
    }
    // Everything before `i` is ASCII, so `i` is a character boundary.
    let suffix = &s[i..];
    const SUFFIXES: [&str; 16] =
        ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if SUFFIXES.contains(&suffix) {
        return true;
    }
    let Some(exponent) = suffix.strip_prefix(['e', 'E']) else { return false };
    let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    !exponent.is_empty() && exponent.bytes().all(|c| c.is_ascii_digit())
}

/// An RFC 3339 date and time as `metav1.Time` reads it (Go's `time.RFC3339` layout):
/// `2026-11-28T10:00:00Z`, with optional fractional seconds and `Z` or a `+hh:mm` offset; the
/// date must exist and the second be below 60.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(b, 0, 4),
        digits(b, 5, 2),
        digits(b, 8, 2),
        digits(b, 11, 2),
        digits(b, 14, 2),
        digits(b, 17, 2),
    ) else {
        return false;
    };
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T') && at(13, b':') && at(16, b':')) {
        return false;
    }
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return false;
    }
    let mut i = 19;
    if at(i, b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match b.get(i..) {
        Some(b"Z") => true,
        Some(zone @ [b'+' | b'-', _, _, b':', _, _]) => {
            digits(zone, 1, 2).is_some_and(|h| h <= 23)
                && digits(zone, 4, 2).is_some_and(|m| m <= 59)
        }
        _ => false,
    }
}

/// The decimal number of `len` ASCII digits at `start` of `b`, or None.
fn digits(b: &[u8], start: usize, len: usize) -> Option<u32> {
    b.get(start..start + len)?
        .iter()
        .try_fold(0u32, |n, c| c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0')))
}

/// The days of `month` (1 to 12) in the proleptic Gregorian `year`.
fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A schema's `x-kubernetes-group-version-kind` entries as (group, version, kind); the core
/// group is `""`.
fn gvks(schema: &Value) -> Vec<(&str, &str, &str)> {
    /// One field of an entry, `""` when absent.
    fn field<'a>(entry: &'a Value, key: &str) -> &'a str {
        entry.get(key).and_then(Value::as_str).unwrap_or("")
    }
    match schema.get("x-kubernetes-group-version-kind") {
        Some(Value::Array(entries)) => entries
            .iter()
            .map(|e| (field(e, "group"), field(e, "version"), field(e, "kind")))
            .collect(),
        Some(e @ Value::Object(_)) => {
            vec![(field(e, "group"), field(e, "version"), field(e, "kind"))]
        }
        _ => Vec::new(),
    }
}

/// Every `$ref` value under `v`.
fn collect_refs<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, sub) in m {
                if k == "$ref" {
                    out.push(sub);
                } else {
                    collect_refs(sub, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|sub| collect_refs(sub, out)),
        _ => {}
    }
}

/// Whether `v` is a JSON integer: a number with no fraction or exponent (Go's decoding of an
/// `int64` refuses `1.0` and `1e3` too).
fn is_integer(v: &Value) -> bool {
    v.as_i64().is_some() || v.as_u64().is_some()
}

/// The JSON type of `v`, as messages name it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) if is_integer(v) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `path` with `key` appended: `.key` for a plain name, `["key"]` for any other.
fn join(path: &str, key: &str) -> String {
    let plain =
        !key.is_empty() && key.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
    match (plain, path.is_empty()) {
        (true, true) => key.to_string(),
        (true, false) => format!("{path}.{key}"),
        (false, _) => format!("{path}[{key:?}]"),
    }
}

/// A path as messages show it: `(root)` for the top object.
fn show(path: &str) -> &str {
    if path.is_empty() {
        "(root)"
    } else {
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::OnceLock;

    const SLICE: &str = "io.k8s.api.resource.v1.ResourceSlice";
    const CLAIM: &str = "io.k8s.api.resource.v1.ResourceClaim";

    /// The `resource.k8s.io/v1` document of `testdata/k8s/openapi-v3/`, read once.
    fn schema() -> &'static Schema {
        static SCHEMA: OnceLock<Schema> = OnceLock::new();
        SCHEMA.get_or_init(|| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../testdata/k8s/openapi-v3/apis__resource.k8s.io__v1_openapi.json");
            Schema::load(&path).unwrap()
        })
    }

    /// A ResourceSlice as an eRDMA DRA driver publishes it: two devices with attributes of each
    /// kind and a capacity.
    fn slice() -> Value {
        json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": "node-a-erdma.aliyun.com-",
                "labels": {"app.kubernetes.io/managed-by": "erdma-dra-plugin"},
                "ownerReferences": [{
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": "node-a",
                    "uid": "5d7e0c1a-0000-4000-8000-00000000a0de",
                    "controller": true
                }]
            },
            "spec": {
                "driver": "erdma.aliyun.com",
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-a",
                "devices": [
                    {
                        "name": "erdma-0",
                        "attributes": {
                            "model": {"string": "eRDMA"},
                            "mtu": {"int": 9000},
                            "sriov": {"bool": false},
                            "driverVersion": {"version": "0.2.37"},
                            "erdma.aliyun.com/numa": {"int": 0}
                        },
                        "capacity": {"bandwidth": {"value": "200Gi"}, "qps": {"value": "1e3"}}
                    },
                    {
                        "name": "erdma-1",
                        "attributes": {"mtu": {"int": 1500}},
                        "capacity": {"bandwidth": {"value": "500m"}}
                    }
                ]
            }
        })
    }

    #[test]
    fn for_kind_maps_group_version_kind_to_schema_names() {
        let s = schema();
        assert_eq!(s.for_kind("resource.k8s.io", "v1", "ResourceSlice"), Some(SLICE));
        assert_eq!(s.for_kind("resource.k8s.io", "v1", "ResourceClaim"), Some(CLAIM));
        assert_eq!(
            s.for_kind("", "v1", "Status"),
            Some("io.k8s.apimachinery.pkg.apis.meta.v1.Status")
        );
        assert_eq!(s.for_kind("resource.k8s.io", "v1beta2", "ResourceSlice"), None);
        assert_eq!(s.for_kind("resource.k8s.io", "v1", "Device"), None);
    }

    #[test]
    fn valid_resource_slice_is_accepted() {
        assert_eq!(schema().validate(SLICE, &slice()), Vec::<String>::new());
    }

    #[test]
    fn unknown_field_is_named() {
        let mut s = slice();
        let device = s["spec"]["devices"][0].as_object_mut().unwrap();
        let attributes = device.remove("attributes").unwrap();
        device.insert("atributes".into(), attributes);
        assert_eq!(schema().validate(SLICE, &s), ["spec.devices[0].atributes: unknown field"]);
    }

    #[test]
    fn unknown_field_in_a_map_value_is_named_with_the_key() {
        let mut s = slice();
        s["spec"]["devices"][0]["attributes"]["erdma.aliyun.com/numa"]["integer"] = json!(1);
        assert_eq!(
            schema().validate(SLICE, &s),
            [r#"spec.devices[0].attributes["erdma.aliyun.com/numa"].integer: unknown field"#]
        );
    }

    #[test]
    fn int_attribute_given_as_a_string_is_a_type_error() {
        let mut s = slice();
        s["spec"]["devices"][0]["attributes"]["mtu"]["int"] = json!("9000");
        assert_eq!(
            schema().validate(SLICE, &s),
            ["spec.devices[0].attributes.mtu.int: expected integer, got string"]
        );
    }

    #[test]
    fn integers_have_no_fraction_and_fit_their_format() {
        let mut s = slice();
        s["spec"]["pool"]["generation"] = json!(1.5);
        s["spec"]["pool"]["resourceSliceCount"] = json!(9_223_372_036_854_775_808u64);
        assert_eq!(
            schema().validate(SLICE, &s),
            [
                "spec.pool.generation: expected integer, got number",
                "spec.pool.resourceSliceCount: 9223372036854775808 is out of the int64 range",
            ]
        );
        let status = json!({"apiVersion": "v1", "kind": "Status", "code": 4_294_967_296u64});
        assert_eq!(
            schema().validate("io.k8s.apimachinery.pkg.apis.meta.v1.Status", &status),
            ["code: 4294967296 is out of the int32 range"]
        );
    }

    #[test]
    fn missing_required_field_is_named() {
        let mut s = slice();
        s["spec"].as_object_mut().unwrap().remove("driver");
        assert_eq!(schema().validate(SLICE, &s), ["spec.driver: missing required field"]);
    }

    #[test]
    fn null_is_accepted_for_optional_fields_only() {
        let mut s = slice();
        s["spec"]["nodeSelector"] = Value::Null;
        s["metadata"]["labels"] = Value::Null;
        s["spec"]["devices"][1]["capacity"] = Value::Null;
        assert_eq!(schema().validate(SLICE, &s), Vec::<String>::new());
        s["spec"]["pool"]["name"] = Value::Null;
        s["spec"]["devices"][1] = Value::Null;
        assert_eq!(
            schema().validate(SLICE, &s),
            [
                "spec.pool.name: missing required field",
                "spec.devices[1]: expected object, got null"
            ]
        );
    }

    #[test]
    fn bad_quantity_is_named() {
        let mut s = slice();
        s["spec"]["devices"][0]["capacity"]["bandwidth"]["value"] = json!("eight");
        s["spec"]["devices"][1]["capacity"]["bandwidth"]["value"] = json!(true);
        assert_eq!(
            schema().validate(SLICE, &s),
            [
                r#"spec.devices[0].capacity.bandwidth.value: invalid quantity "eight""#,
                "spec.devices[1].capacity.bandwidth.value: expected quantity (string or number), got boolean",
            ]
        );
    }

    #[test]
    fn quantity_syntax() {
        for ok in [
            "1", "8", "100Gi", "1.5", "500m", "1e3", "1E-2", "+1", "-2", ".5", "5.", "0", "3n",
            "7u", "2k", "4M", "1Ei", "1E", " 1Gi ",
        ] {
            assert!(is_quantity(ok.trim()), "{ok:?} is a quantity");
        }
        for bad in [
            "eight", "", "Gi", "1Gb", "1K", "1ki", "1.5.5", "1 Gi", "e3", "1e", "1e+", "1e3.5",
            ".", "-", "1Gi1", "0x10", "١",
        ] {
            assert!(!is_quantity(bad.trim()), "{bad:?} is no quantity");
        }
        // A JSON number is read as its text, which always fits.
        let mut s = slice();
        s["spec"]["devices"][0]["capacity"]["bandwidth"]["value"] = json!(8);
        s["spec"]["devices"][1]["capacity"]["bandwidth"]["value"] = json!(1.5);
        assert_eq!(schema().validate(SLICE, &s), Vec::<String>::new());
    }

    #[test]
    fn wrong_kind_and_api_version_are_named() {
        let mut s = slice();
        s["apiVersion"] = json!("resource.k8s.io/v1beta2");
        s["kind"] = json!("ResourceClaim");
        assert_eq!(
            schema().validate(SLICE, &s),
            [
                r#"apiVersion: expected "resource.k8s.io/v1", got "resource.k8s.io/v1beta2""#,
                r#"kind: expected "ResourceSlice", got "ResourceClaim""#,
            ]
        );
        let obj = s.as_object_mut().unwrap();
        obj.remove("apiVersion");
        obj.insert("kind".into(), json!(5));
        assert_eq!(
            schema().validate(SLICE, &s),
            [
                r#"apiVersion: missing, expected "resource.k8s.io/v1""#,
                "kind: expected string, got integer",
            ]
        );
    }

    #[test]
    fn resource_claim_with_an_allocation_is_accepted() {
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": "rdma",
                "namespace": "ns1",
                "uid": "0b0e6c5e-0000-4000-8000-000000000001",
                "creationTimestamp": "2026-11-28T10:00:00Z"
            },
            "spec": {"devices": {"requests": [{
                "name": "rdma",
                "exactly": {"deviceClassName": "erdma.aliyun.com", "allocationMode": "ExactCount", "count": 1}
            }]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{
                            "request": "rdma",
                            "driver": "erdma.aliyun.com",
                            "pool": "node-a",
                            "device": "erdma-0"
                        }],
                        "config": [{
                            "source": "FromClaim",
                            "requests": ["rdma"],
                            "opaque": {"driver": "erdma.aliyun.com", "parameters": {"mode": "shared"}}
                        }]
                    },
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
                    ]}]}
                },
                "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": "0b0e6c5e-0000-4000-8000-000000000002"}],
                "devices": [{
                    "driver": "erdma.aliyun.com",
                    "pool": "node-a",
                    "device": "erdma-0",
                    "conditions": [{
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": "2026-11-28T10:00:01.5+08:00",
                        "reason": "Prepared",
                        "message": ""
                    }],
                    "networkData": {"interfaceName": "erdma_0", "ips": ["10.0.0.5/24"]},
                    "data": {"any": ["thing", 1]}
                }]
            }
        });
        assert_eq!(schema().validate(CLAIM, &claim), Vec::<String>::new());
        let mut bad = claim.clone();
        bad["status"]["allocation"]["devices"]["results"][0]
            .as_object_mut()
            .unwrap()
            .remove("pool");
        bad["status"]["devices"][0]["conditions"][0]["lastTransitionTime"] =
            json!("2026-02-29T10:00:00Z");
        assert_eq!(
            schema().validate(CLAIM, &bad),
            [
                "status.allocation.devices.results[0].pool: missing required field",
                r#"status.devices[0].conditions[0].lastTransitionTime: invalid date-time "2026-02-29T10:00:00Z" (RFC 3339)"#,
            ]
        );
    }

    #[test]
    fn rfc3339() {
        for ok in
            ["2026-11-28T10:00:00Z", "2024-02-29T23:59:59.123456789Z", "2026-01-01T00:00:00-05:30"]
        {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "2026-11-28",
            "2026-11-28 10:00:00Z",
            "2026-11-28t10:00:00z",
            "2026-13-01T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-28T24:00:00Z",
            "2026-11-28T10:00:60Z",
            "2026-11-28T10:00:00.Z",
            "2026-11-28T10:00:00+0800",
            "2026-11-28T10:00:00+24:00",
            "2026-11-28T10:00:00",
            "yesterday",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }

    #[test]
    fn unknown_schema_name_is_a_violation() {
        assert_eq!(
            schema().validate("io.k8s.api.resource.v1.Nothing", &json!({})),
            [r#"(root): no schema "io.k8s.api.resource.v1.Nothing" in the document"#]
        );
        assert_eq!(schema().validate(SLICE, &json!([])), ["(root): expected object, got array"]);
    }

    /// The keywords the fixture does not use, on a document of their own.
    #[test]
    fn int_or_string_preserve_unknown_fields_enum_and_additional_properties() {
        let doc = json!({"components": {"schemas": {
            "T": {
                "type": "object",
                "properties": {
                    "port": {"x-kubernetes-int-or-string": true},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "mode": {"type": "string", "enum": ["a", "b"]},
                    "closed": {"type": "object", "properties": {"x": {"type": "number"}}, "additionalProperties": false},
                    "open": {"type": "object", "properties": {"x": {"type": "number"}}, "additionalProperties": true},
                    "ref": {"$ref": "#/components/schemas/U"}
                }
            },
            "U": {"type": "array", "items": {"type": "boolean"}}
        }}});
        let s = Schema::from_value(doc).unwrap();
        let good = json!({
            "port": "http",
            "free": {"anything": [1, {"goes": null}]},
            "mode": "b",
            "closed": {"x": 1.5},
            "open": {"x": 1, "y": "z"},
            "ref": [true, false]
        });
        assert_eq!(s.validate("T", &good), Vec::<String>::new());
        assert_eq!(s.validate("T", &json!({"port": 8080})), Vec::<String>::new());
        let bad = json!({
            "port": 1.5,
            "mode": "c",
            "closed": {"x": 1, "y": 2},
            "ref": [true, "no"]
        });
        assert_eq!(
            s.validate("T", &bad),
            [
                "port: expected integer or string, got number",
                r#"mode: "c" is not one of ["a","b"]"#,
                "closed.y: unknown field",
                "ref[1]: expected boolean, got string",
            ]
        );
    }

    #[test]
    fn documents_without_schemas_or_with_dangling_refs_are_refused() {
        assert_eq!(
            Schema::from_value(json!({"openapi": "3.0.0"})).unwrap_err(),
            "not an OpenAPI v3 document: no `components` object"
        );
        let dangling = json!({"components": {"schemas": {
            "T": {"properties": {"a": {"allOf": [{"$ref": "#/components/schemas/Gone"}]}}}
        }}});
        assert_eq!(
            Schema::from_value(dangling).unwrap_err(),
            r##"schema T: $ref "#/components/schemas/Gone" points to no schema here"##
        );
        let missing = Path::new("/nonexistent/openapi.json");
        assert!(Schema::load(missing)
            .unwrap_err()
            .starts_with("reading /nonexistent/openapi.json: "));
    }
}
