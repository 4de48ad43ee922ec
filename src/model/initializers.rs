//! A few scalar initialisers of an ONNX file (`ModelProto.graph.initializer`), read without an
//! ONNX library: SigLIP's `logit_scale` and `logit_bias` from a full `onnx/model.onnx`.
//!
//! Protobuf's wire format is a run of fields, each a varint key (field number << 3 | wire type)
//! and a value: a varint (wire type 0), 8 bytes (1), a varint length and that many bytes (2), or
//! 4 bytes (5). The walk descends into `ModelProto.graph` (field 7) and parses each
//! `GraphProto.initializer` (field 5, a `TensorProto`) that is small enough to be a scalar;
//! everything else, the weights included, is skipped by seeking, so a large model costs no reading.

use std::{
    collections::HashMap,
    io::{self, Cursor, Read, Seek, SeekFrom},
};

const MODEL_GRAPH: u64 = 7;
const GRAPH_INITIALIZER: u64 = 5;
const TENSOR_DATA_TYPE: u64 = 2;
const TENSOR_FLOAT_DATA: u64 = 4;
const TENSOR_NAME: u64 = 8;
const TENSOR_RAW_DATA: u64 = 9;
/// `TensorProto.DataType.FLOAT`.
const FLOAT: u64 = 1;
/// An initialiser larger than this (in bytes of protobuf) is weights, not a scalar.
const SMALL: u64 = 4096;

/// Wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LENGTH_DELIMITED: u64 = 2;
const FIXED32: u64 = 5;

/// The first value of each float initialiser named in `names` that the file holds.
pub fn scalars(mut model: impl Read + Seek, names: &[&str]) -> io::Result<HashMap<String, f32>> {
    let mut found = HashMap::new();
    while let Some((field, wire)) = key(&mut model)? {
        if (field, wire) != (MODEL_GRAPH, LENGTH_DELIMITED) {
            skip(&mut model, wire)?;
            continue;
        }
        let end = varint(&mut model)? + model.stream_position()?;
        while model.stream_position()? < end {
            let (field, wire) = key(&mut model)?.ok_or_else(|| truncated("graph"))?;
            if (field, wire) != (GRAPH_INITIALIZER, LENGTH_DELIMITED) {
                skip(&mut model, wire)?;
                continue;
            }
            let len = varint(&mut model)?;
            if len > SMALL {
                model.seek(SeekFrom::Current(len as i64))?;
                continue;
            }
            let mut tensor = vec![0; len as usize];
            model.read_exact(&mut tensor)?;
            if let Some((name, value)) = float_scalar(&tensor)?
                && names.contains(&name.as_str())
            {
                found.insert(name, value);
            }
        }
    }
    Ok(found)
}

/// A `TensorProto`'s name and first float, when it holds floats.
fn float_scalar(tensor: &[u8]) -> io::Result<Option<(String, f32)>> {
    let mut tensor = Cursor::new(tensor);
    let (mut name, mut data_type, mut first) = (None, None, None);
    while let Some((field, wire)) = key(&mut tensor)? {
        match (field, wire) {
            (TENSOR_DATA_TYPE, VARINT) => data_type = Some(varint(&mut tensor)?),
            (TENSOR_NAME, LENGTH_DELIMITED) => name = Some(String::from_utf8_lossy(&bytes(&mut tensor)?).into_owned()),
            // Packed floats (float_data) or little-endian bytes (raw_data): the first four bytes.
            (TENSOR_FLOAT_DATA | TENSOR_RAW_DATA, LENGTH_DELIMITED) => first = first_float(&bytes(&mut tensor)?),
            (TENSOR_FLOAT_DATA, FIXED32) => {
                let mut value = [0; 4];
                tensor.read_exact(&mut value)?;
                first = first.or(Some(f32::from_le_bytes(value)));
            }
            _ => skip(&mut tensor, wire)?,
        }
    }
    Ok(name.zip(first).filter(|_| data_type == Some(FLOAT)))
}

fn first_float(bytes: &[u8]) -> Option<f32> {
    bytes.first_chunk::<4>().map(|b| f32::from_le_bytes(*b))
}

/// The next field's number and wire type; `None` at the end of the input.
fn key(input: &mut impl Read) -> io::Result<Option<(u64, u64)>> {
    let mut first = [0];
    if input.read(&mut first)? == 0 {
        return Ok(None);
    }
    let key = if first[0] & 0x80 == 0 { u64::from(first[0]) } else { continue_varint(input, first[0])? };
    Ok(Some((key >> 3, key & 7)))
}

fn varint(input: &mut impl Read) -> io::Result<u64> {
    let mut first = [0];
    input.read_exact(&mut first)?;
    if first[0] & 0x80 == 0 { Ok(u64::from(first[0])) } else { continue_varint(input, first[0]) }
}

/// A varint whose first byte, `first`, has its continuation bit set: 7 bits a byte, low first.
fn continue_varint(input: &mut impl Read, first: u8) -> io::Result<u64> {
    let mut value = u64::from(first & 0x7f);
    for shift in (7..64).step_by(7) {
        let mut byte = [0];
        input.read_exact(&mut byte)?;
        value |= u64::from(byte[0] & 0x7f) << shift;
        if byte[0] & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "a varint longer than 10 bytes: not an ONNX file"))
}

fn bytes(input: &mut impl Read) -> io::Result<Vec<u8>> {
    let len = varint(input)?;
    let mut value = Vec::new();
    input.take(len).read_to_end(&mut value)?;
    if value.len() as u64 != len {
        return Err(truncated("field"));
    }
    Ok(value)
}

/// Skips the value of a field of wire type `wire`.
fn skip(input: &mut (impl Read + Seek), wire: u64) -> io::Result<()> {
    let len = match wire {
        VARINT => return varint(input).map(drop),
        FIXED64 => 8,
        LENGTH_DELIMITED => varint(input)?,
        FIXED32 => 4,
        other => {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("wire type {other}: not an ONNX file")));
        }
    };
    input.seek(SeekFrom::Current(len as i64)).map(drop)
}

fn truncated(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("the {what} ends early: a truncated ONNX file"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Protobuf by hand: a key, then the value.
    fn field(number: u64, wire: u64, value: &[u8]) -> Vec<u8> {
        let mut out = encode(number << 3 | wire);
        if wire == LENGTH_DELIMITED {
            out.extend(encode(value.len() as u64));
        }
        out.extend_from_slice(value);
        out
    }

    fn encode(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn tensor(name: &str, data_type: u64, data: Vec<u8>) -> Vec<u8> {
        [
            field(1, VARINT, &encode(1)),
            field(TENSOR_DATA_TYPE, VARINT, &encode(data_type)),
            data,
            field(8, 2, name.as_bytes()),
        ]
        .concat()
    }

    #[test]
    fn finds_the_named_scalars_and_skips_the_rest() {
        let weights = tensor("big", FLOAT, field(TENSOR_RAW_DATA, LENGTH_DELIMITED, &vec![7; 10_000]));
        let scale = tensor("logit_scale", FLOAT, field(TENSOR_RAW_DATA, LENGTH_DELIMITED, &2.5f32.to_le_bytes()));
        let bias = tensor("logit_bias", FLOAT, field(TENSOR_FLOAT_DATA, LENGTH_DELIMITED, &(-3.5f32).to_le_bytes()));
        let int = tensor("logit_other", 7, field(TENSOR_RAW_DATA, LENGTH_DELIMITED, &1i64.to_le_bytes()));
        let node = field(1, LENGTH_DELIMITED, b"a node, skipped");
        let graph = [node, field(5, 2, &weights), field(5, 2, &scale), field(5, 2, &int), field(5, 2, &bias)].concat();
        let model = [field(1, VARINT, &encode(8)), field(2, 2, b"producer"), field(MODEL_GRAPH, 2, &graph)].concat();
        let found = scalars(Cursor::new(&model), &["logit_scale", "logit_bias", "logit_other"]).unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found["logit_scale"], found["logit_bias"]), (2.5, -3.5));
        assert!(scalars(Cursor::new(&model[..model.len() - 3]), &["logit_bias"]).is_err(), "a truncated file");
        assert!(scalars(Cursor::new(b"not onnx at all"), &["logit_bias"]).is_err());
    }
}
