//! Serde helpers that refuse an over-long list before decoding it.
//!
//! Why: the trace codec caps the file (and every string), but a list of
//! one-byte items (a permitted backend, a symbol's service) decodes to tens
//! of bytes each, and framing repeats a symbol's name for each of its
//! services. Bounding the counts at the decoder keeps what a trace of a
//! given size can cost in memory proportional to that size. The limits are
//! reader policy, documented in `docs/trace-format.md`; every value this
//! crate writes is far below them.

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

/// Most permitted backends, and most permitted contracts, in a context.
pub const MAX_PERMITTED: usize = 64;
/// Most modules in a context.
pub const MAX_MODULES: usize = 256;
/// Most pinned vendor configurations (one per problem family) in a context.
pub const MAX_PINS: usize = 65_536;
/// Most symbols in one module.
pub const MAX_SYMBOLS: usize = 65_536;
/// Most services of one symbol.
pub const MAX_SERVICES: usize = 64;
/// Most volatile (per-machine) entries in a trace.
pub const MAX_VOLATILE: usize = 1024;
/// Most entries of a route's short lists (device capabilities, a vendor
/// call's physical kernels): a handful in any real route; the cap keeps a
/// hostile file from costing memory out of proportion to its bytes (an
/// empty string is one byte in a file and 24 in memory).
pub const MAX_ROUTE_LIST: usize = 64;

struct SeqVisitor<T> {
    what: &'static str,
    max: usize,
    item: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for SeqVisitor<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at most {} {}", self.max, self.what)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let hint = seq.size_hint().unwrap_or(0);
        if hint > self.max {
            return Err(A::Error::invalid_length(hint, &self));
        }
        // Grow as items actually decode: a declared count costs nothing.
        let mut out = Vec::with_capacity(hint.min(1024));
        while let Some(x) = seq.next_element()? {
            if out.len() == self.max {
                return Err(A::Error::invalid_length(self.max + 1, &self));
            }
            out.push(x);
        }
        Ok(out)
    }
}

fn seq<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    what: &'static str,
    max: usize,
) -> Result<Vec<T>, D::Error> {
    d.deserialize_seq(SeqVisitor {
        what,
        max,
        item: PhantomData,
    })
}

/// At most [`MAX_PERMITTED`] items.
pub(crate) fn permitted<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, "permitted backends or contracts", MAX_PERMITTED)
}

/// At most [`MAX_MODULES`] items.
pub(crate) fn modules<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, "modules", MAX_MODULES)
}

/// At most [`MAX_PINS`] items.
pub(crate) fn pins<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, "pinned vendor configurations", MAX_PINS)
}

/// At most [`MAX_SYMBOLS`] items.
pub(crate) fn symbols<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, "symbols in a module", MAX_SYMBOLS)
}

/// At most [`MAX_ROUTE_LIST`] items.
pub(crate) fn route_list<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, "entries of a route's list", MAX_ROUTE_LIST)
}

/// At most [`MAX_SERVICES`] items.
pub(crate) fn services<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, "services of a symbol", MAX_SERVICES)
}

struct MapVisitor {
    max: usize,
}

impl<'de> Visitor<'de> for MapVisitor {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at most {} volatile entries", self.max)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let hint = map.size_hint().unwrap_or(0);
        if hint > self.max {
            return Err(A::Error::invalid_length(hint, &self));
        }
        let mut out = BTreeMap::new();
        while let Some((k, v)) = map.next_entry::<String, String>()? {
            if out.len() == self.max {
                return Err(A::Error::invalid_length(self.max + 1, &self));
            }
            out.insert(k, v);
        }
        Ok(out)
    }
}

/// At most [`MAX_VOLATILE`] entries.
pub(crate) fn volatile<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    d.deserialize_map(MapVisitor { max: MAX_VOLATILE })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug)]
    struct Holder {
        #[serde(deserialize_with = "services")]
        items: Vec<u8>,
        #[serde(deserialize_with = "volatile")]
        map: BTreeMap<String, String>,
    }

    #[test]
    fn over_long_lists_are_refused_before_decoding() {
        let ok = Holder {
            items: vec![1; MAX_SERVICES],
            map: (0..3).map(|i| (i.to_string(), String::new())).collect(),
        };
        let json = serde_json::to_string(&ok).unwrap();
        assert_eq!(
            serde_json::from_str::<Holder>(&json).unwrap().items.len(),
            MAX_SERVICES
        );
        let long = Holder {
            items: vec![1; MAX_SERVICES + 1],
            map: BTreeMap::new(),
        };
        let e = serde_json::from_str::<Holder>(&serde_json::to_string(&long).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 64 services of a symbol"), "{e}");
        let wide = Holder {
            items: Vec::new(),
            map: (0..=MAX_VOLATILE)
                .map(|i| (i.to_string(), String::new()))
                .collect(),
        };
        let e = serde_json::from_str::<Holder>(&serde_json::to_string(&wide).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 1024 volatile entries"), "{e}");
    }
}
