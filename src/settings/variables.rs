//! The names of the variables: every group's list, kept beside its struct (`VARIABLES` in each
//! file) so that `grep -rn CLIPFN_BATCH_WAIT_MS src` finds where a setting is defined, and held to
//! the struct's fields by a unit test (envy reads a field from `CLIPFN_` + its name upper-cased,
//! so the names appear nowhere else).

use super::{faces, limits, model, objects, ocr, server, signals, sources, text};

/// Every group's variables, in the order `Settings` holds the groups.
const GROUPS: &[&[&str]] = &[
    server::VARIABLES,
    limits::VARIABLES,
    model::VARIABLES,
    sources::VARIABLES,
    text::VARIABLES,
    signals::VARIABLES,
    faces::VARIABLES,
    ocr::VARIABLES,
    objects::VARIABLES,
];

/// Every `CLIPFN_*` variable the settings read.
pub fn variables() -> impl Iterator<Item = &'static str> {
    GROUPS.iter().flat_map(|group| group.iter().copied())
}

#[cfg(test)]
mod tests {
    use serde::{
        Deserializer,
        de::{DeserializeOwned, Error as _, Visitor, value::Error},
    };

    use super::*;
    use crate::settings::{
        FaceSettings, Limits, ModelSettings, ObjectSettings, OcrSettings, ServerSettings, SignalSettings,
        SourceSettings, TextSettings,
    };

    /// A deserializer that answers nothing but records the field names a struct asks for: what
    /// envy turns into variable names.
    struct FieldNames<'a>(&'a mut Option<&'static [&'static str]>);

    impl<'de> Deserializer<'de> for FieldNames<'_> {
        type Error = Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
            Err(Error::custom("a settings group deserializes a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Error> {
            *self.0 = Some(fields);
            Err(Error::custom("field names recorded"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    /// The variables envy reads for `T`: `CLIPFN_` + each field's name upper-cased, in order.
    fn read_by<T: DeserializeOwned>() -> Vec<String> {
        let mut fields = None;
        let _ = T::deserialize(FieldNames(&mut fields));
        let fields = fields.expect("a settings group is a struct");
        fields.iter().map(|field| format!("CLIPFN_{}", field.to_ascii_uppercase())).collect()
    }

    #[test]
    fn each_list_names_exactly_its_structs_fields() {
        let groups = [
            ("ServerSettings", read_by::<ServerSettings>(), server::VARIABLES),
            ("Limits", read_by::<Limits>(), limits::VARIABLES),
            ("ModelSettings", read_by::<ModelSettings>(), model::VARIABLES),
            ("SourceSettings", read_by::<SourceSettings>(), sources::VARIABLES),
            ("TextSettings", read_by::<TextSettings>(), text::VARIABLES),
            ("SignalSettings", read_by::<SignalSettings>(), signals::VARIABLES),
            ("FaceSettings", read_by::<FaceSettings>(), faces::VARIABLES),
            ("OcrSettings", read_by::<OcrSettings>(), ocr::VARIABLES),
            ("ObjectSettings", read_by::<ObjectSettings>(), objects::VARIABLES),
        ];
        assert_eq!(groups.len(), GROUPS.len(), "a group is missing from GROUPS or from this test");
        for (group, fields, listed) in groups {
            assert_eq!(fields, listed, "{group}'s VARIABLES and its fields differ");
        }
        let mut all: Vec<&str> = variables().collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a variable is listed by two groups");
    }
}
