//! One message written as JSON text by the schema tables, with no Rust type in between: what
//! a reader that wants an object's JSON is given when only its protobuf is kept (the lean cache
//! mode, I7).
//!
//! The decoder ([`super::de`]) drives a visitor that writes JSON as it goes: keys in wire
//! order (field numbers, which follow the Go structs' order), the values the decoder gives a
//! JSON-reading type (times as RFC 3339, quantities, int-or-strings, `bytes` as base64,
//! embedded JSON). A field the decoder reads as absent (Go's `omitempty` zero value, a zero
//! time) is left out, so the text decodes to the object the server's JSON decodes to.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{ProtobufError, de::ObjectDe, schema::Message};

/// `message` (of `schema`) as JSON text; `types` (apiVersion, kind) written first when given.
///
/// # Errors
/// [`ProtobufError`] for malformed wire data, as [`super::decode_message`] reports it.
pub fn message_to_json(
    message: &[u8],
    schema: &'static Message,
    types: Option<(&str, &str)>,
) -> Result<Vec<u8>, ProtobufError> {
    let mut out = Vec::with_capacity(message.len() * 2);
    let object = |gather| ObjectDe {
        buf: message,
        msg: schema,
        types,
        gather,
    };
    match Json(&mut out).deserialize(object(false)) {
        Err(ProtobufError::Interleaved) => {
            out.clear();
            Json(&mut out).deserialize(object(true))?;
        }
        r => r?,
    }
    Ok(out)
}

/// Writes the value it is given into its buffer.
struct Json<'o>(&'o mut Vec<u8>);

/// Writes the value, or nothing when the deserializer says it is absent (`deserialize_option`
/// → none); says whether it wrote.
struct Field<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Json<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> DeserializeSeed<'de> for Field<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_option(self)
    }
}

fn write<T: serde::Serialize + ?Sized, E: de::Error>(out: &mut Vec<u8>, v: &T) -> Result<(), E> {
    serde_json::to_writer(out, v).map_err(E::custom)
}

impl<'de> Visitor<'de> for Field<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field's value")
    }

    fn visit_none<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        Json(self.0).deserialize(d).map(|()| true)
    }

    // A deserializer without options of its own (the envelope's types) gives the value.
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Json(self.0).visit_bool(v).map(|()| true)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        Json(self.0).visit_i64(v).map(|()| true)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        Json(self.0).visit_u64(v).map(|()| true)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        Json(self.0).visit_f64(v).map(|()| true)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Json(self.0).visit_str(v).map(|()| true)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Json(self.0).visit_unit().map(|()| true)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        Json(self.0).deserialize(d).map(|()| true)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        Json(self.0).visit_seq(seq).map(|()| true)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        Json(self.0).visit_map(map).map(|()| true)
    }
}

impl<'de> Visitor<'de> for Json<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        write(self.0, &v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        write(self.0, &v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        write(self.0, &v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        write(self.0, &v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        write(self.0, v)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push(b'[');
        let mut first = true;
        loop {
            let mark = self.0.len();
            if !first {
                self.0.push(b',');
            }
            if seq.next_element_seed(Json(self.0))?.is_none() {
                self.0.truncate(mark);
                break;
            }
            first = false;
        }
        self.0.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push(b'{');
        let mut first = true;
        loop {
            let mark = self.0.len();
            if !first {
                self.0.push(b',');
            }
            if map.next_key_seed(Json(self.0))?.is_none() {
                self.0.truncate(mark);
                break;
            }
            self.0.push(b':');
            if map.next_value_seed(Field(self.0))? {
                first = false;
            } else {
                // Absent: its key goes too.
                self.0.truncate(mark);
            }
        }
        self.0.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::protobuf::{object_message, schema::CORE_V1_POD};

    #[test]
    fn a_pods_json_decodes_to_the_pod() {
        let v = json!({"metadata": {"name": "p", "namespace": "n",
            "creationTimestamp": "2025-01-01T00:00:00Z", "labels": {"a": "1", "b": ""},
            "managedFields": [{"manager": "m", "fieldsV1": {"f:a": {}, "f:b": {".": {}}}}]},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [
                {"containerPort": 80}], "resources": {"limits": {"cpu": "1"}}}],
                "priority": 0},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]}});
        // Zero values Go's JSON leaves out (omitempty, not pointers), which gogo writes.
        let mut wire = v.clone();
        wire["spec"]["hostNetwork"] = json!(false);
        wire["metadata"]["generateName"] = json!("");
        let msg = object_message("v1", "Pod", &wire).expect("encodes");
        let text = message_to_json(&msg, &CORE_V1_POD, Some(("v1", "Pod"))).expect("renders");
        let back: serde_json::Value = serde_json::from_slice(&text).expect("JSON");
        assert!(back["spec"].get("hostNetwork").is_none(), "{back}");
        assert!(back["metadata"].get("generateName").is_none(), "{back}");
        assert_eq!(back["apiVersion"], "v1");
        assert_eq!(back["kind"], "Pod");
        let pod: Pod = serde_json::from_value(back).expect("a pod");
        assert_eq!(pod, serde_json::from_value::<Pod>(v).expect("a pod"));
        assert!(message_to_json(&msg[..msg.len() - 3], &CORE_V1_POD, None).is_err());
    }
}
