//! The names a listing returns, as one buffer on the way out.
//!
//! On the wire a listing is a `Vec<String>`. A server listing 100 000
//! children would make 100 000 strings only to copy them into the reply and
//! free them; [`ChildNames::encode_names`] writes the names straight into
//! the bytes they will be sent as instead. Decoded, a listing is a plain
//! list of strings again, so a client sees no difference.

use bincode::de::Decoder;
use bincode::enc::write::Writer;
use bincode::enc::Encoder;
use bincode::error::{DecodeError, EncodeError};
use bincode::{Decode, Encode};

use crate::codec;

/// A node's child names, in the order a listing returns them.
#[derive(Debug, Clone)]
pub struct ChildNames(Repr);

#[derive(Debug, Clone)]
enum Repr {
    /// As decoded, or as built by a caller holding strings.
    Names(Vec<String>),
    /// `count` names, each already in its wire form (length, then bytes).
    Encoded { count: usize, bytes: Vec<u8> },
}

impl ChildNames {
    /// The names, encoded as they go: one growing buffer, no string each.
    ///
    /// ```
    /// use arbor_protocol::ChildNames;
    ///
    /// let names = ChildNames::encode_names(["a", "b"]).expect("encodes");
    /// assert_eq!(names.into_vec(), ["a", "b"]);
    /// ```
    pub fn encode_names<'a>(
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, codec::EncodeError> {
        let mut bytes = Vec::new();
        let mut count = 0;
        for name in names {
            codec::encode_into(&name, &mut bytes)?;
            count += 1;
        }
        Ok(ChildNames(Repr::Encoded { count, bytes }))
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Names(names) => names.len(),
            Repr::Encoded { count, .. } => *count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// About how many bytes the names take on the wire (each name and a
    /// length byte or so); for bounding what a server holds unsent.
    pub fn encoded_len(&self) -> usize {
        match &self.0 {
            Repr::Names(names) => names.iter().map(|name| name.len() + 1).sum(),
            Repr::Encoded { bytes, .. } => bytes.len(),
        }
    }

    /// The names as strings (decoding them if they were built encoded).
    pub fn into_vec(self) -> Vec<String> {
        match self.0 {
            Repr::Names(names) => names,
            Repr::Encoded { count, bytes } => {
                // The bytes are a list's body; with its length in front they
                // decode as the list. They were made by `encode_names`, so a
                // failure here is a bug, not bad input.
                let mut list = Vec::with_capacity(bytes.len() + 9);
                let decoded = codec::encode_into(&(count as u64), &mut list)
                    .ok()
                    .and_then(|_| {
                        list.extend_from_slice(&bytes);
                        codec::decode::<Vec<String>>(&list).ok()
                    });
                decoded.expect("names encoded by encode_names decode")
            }
        }
    }
}

impl From<Vec<String>> for ChildNames {
    fn from(names: Vec<String>) -> Self {
        ChildNames(Repr::Names(names))
    }
}

impl PartialEq for ChildNames {
    fn eq(&self, other: &Self) -> bool {
        self.clone().into_vec() == other.clone().into_vec()
    }
}

impl Eq for ChildNames {}

impl Encode for ChildNames {
    fn encode<E: Encoder>(&self, encoder: &mut E) -> Result<(), EncodeError> {
        match &self.0 {
            Repr::Names(names) => names.encode(encoder),
            // What `Vec<String>` writes: the length as a u64, then each
            // string, whose wire form `encode_names` already made.
            Repr::Encoded { count, bytes } => {
                (*count as u64).encode(encoder)?;
                encoder.writer().write(bytes)
            }
        }
    }
}

impl<Context> Decode<Context> for ChildNames {
    fn decode<D: Decoder<Context = Context>>(decoder: &mut D) -> Result<Self, DecodeError> {
        Vec::<String>::decode(decoder).map(ChildNames::from)
    }
}

bincode::impl_borrow_decode!(ChildNames);

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        // Lengths on both sides of each step of the length's encoding.
        let mut names: Vec<String> = ["", "a", "lock-0000000001", "ünïcødé"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        names.extend([250, 251, 300, 65_535, 65_536].map(|len| "x".repeat(len)));
        names
    }

    // Proves names encoded on the way out are the bytes a Vec<String> makes.
    #[test]
    fn encoded_names_are_the_bytes_of_a_list_of_strings() {
        let names = names();
        let encoded = ChildNames::encode_names(names.iter().map(String::as_str)).expect("encodes");
        assert_eq!(
            codec::encode(&encoded).expect("encodes"),
            codec::encode(&names).expect("encodes")
        );
        let empty = ChildNames::encode_names([]).expect("encodes");
        assert_eq!(
            codec::encode(&empty).expect("encodes"),
            codec::encode(&Vec::<String>::new()).expect("encodes")
        );
    }

    // Proves either form decodes to the same names, and compares equal.
    #[test]
    fn both_forms_decode_to_the_same_names() {
        let names = names();
        let encoded = ChildNames::encode_names(names.iter().map(String::as_str)).expect("encodes");
        assert_eq!(encoded.len(), names.len());
        let decoded: ChildNames =
            codec::decode(&codec::encode(&encoded).expect("encodes")).expect("decodes");
        assert_eq!(decoded.clone().into_vec(), names);
        assert_eq!(encoded.clone().into_vec(), names);
        assert_eq!(decoded, encoded);
        assert_ne!(encoded, ChildNames::from(vec!["other".to_owned()]));
    }
}
