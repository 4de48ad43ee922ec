//! The settings of a model folder's `tokenizer_config.json` (transformers' side of a tokenizer)
//! that change the ids: lower-casing, and the padding that SigLIP 1's `tokenizer.json` leaves out.

use serde::Deserialize;
use serde_json::Value;

use super::TokenizerError;

/// `model_max_length` above this is transformers' "no limit" (Gemma's 1e30), not a length to pad to.
const NO_LIMIT: u64 = 1 << 20;

#[derive(Debug, Default, PartialEq)]
pub struct TokenizerConfig {
    pub do_lower_case: bool,
    /// The pad token's text.
    pub pad_token: Option<String>,
    /// A real length limit: absent, or transformers' huge "no limit", is `None`.
    pub model_max_length: Option<usize>,
    /// Whether padding goes on the left (`padding_side: "left"`); transformers' default is the right.
    pub pads_left: bool,
}

impl TokenizerConfig {
    pub fn parse(bytes: &[u8]) -> Result<Self, TokenizerError> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            do_lower_case: Option<bool>,
            #[serde(default)]
            pad_token: Option<Value>,
            // Any number: Gemma's 1000000000000000019884624838656 does not fit a u64.
            #[serde(default)]
            model_max_length: Option<Value>,
            #[serde(default)]
            padding_side: Option<String>,
        }
        let bad = |setting: &str, value: &dyn std::fmt::Display| {
            TokenizerError::Config(format!("'{setting}': {value} is not what transformers takes there"))
        };
        let file: File =
            serde_json::from_slice(bytes).map_err(|e| TokenizerError::Config(format!("not a valid config: {e}")))?;
        let pad_token = match file.pad_token {
            None | Some(Value::Null) => None,
            Some(Value::String(token)) => Some(token),
            // An AddedToken written out whole.
            Some(Value::Object(token)) if token.get("content").is_some_and(Value::is_string) => {
                token["content"].as_str().map(String::from)
            }
            Some(other) => return Err(bad("pad_token", &other)),
        };
        let model_max_length = match file.model_max_length {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(length @ 1..=NO_LIMIT) => Some(length as usize),
                _ if n.as_f64().is_some_and(|f| f > NO_LIMIT as f64) => None,
                _ => return Err(bad("model_max_length", &n)),
            },
            Some(other) => return Err(bad("model_max_length", &other)),
        };
        let pads_left = match file.padding_side.as_deref() {
            None | Some("right") => false,
            Some("left") => true,
            Some(other) => return Err(bad("padding_side", &other)),
        };
        Ok(TokenizerConfig {
            do_lower_case: file.do_lower_case.unwrap_or(false),
            pad_token,
            model_max_length,
            pads_left,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<TokenizerConfig, String> {
        TokenizerConfig::parse(json.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_what_changes_the_ids() {
        let siglip = parse(r#"{"do_lower_case": true, "pad_token": "</s>", "model_max_length": 64}"#).unwrap();
        let want = TokenizerConfig {
            do_lower_case: true,
            pad_token: Some("</s>".into()),
            model_max_length: Some(64),
            pads_left: false,
        };
        assert_eq!(siglip, want);
        let gemma = parse(
            r#"{"pad_token": {"content": "<pad>", "special": true}, "padding_side": "left",
                "model_max_length": 1000000000000000019884624838656}"#,
        )
        .unwrap();
        assert_eq!((gemma.pad_token.as_deref(), gemma.model_max_length, gemma.pads_left), (Some("<pad>"), None, true));
        assert_eq!(parse("{}").unwrap(), TokenizerConfig::default());
    }

    #[test]
    fn odd_values_name_their_setting() {
        for (json, setting) in [
            (r#"{"model_max_length": "64"}"#, "'model_max_length'"),
            (r#"{"model_max_length": 0}"#, "'model_max_length'"),
            (r#"{"model_max_length": 6.5}"#, "'model_max_length'"),
            (r#"{"padding_side": "middle"}"#, "'padding_side'"),
            (r#"{"pad_token": 1}"#, "'pad_token'"),
            (r#"{"do_lower_case": "yes"}"#, "not a valid config"),
        ] {
            let message = parse(json).unwrap_err();
            assert!(message.contains("tokenizer_config.json") && message.contains(setting), "{json}: {message}");
        }
    }
}
