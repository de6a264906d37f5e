//! The string limit, checked through `Serialize`: every string a trace
//! holds, in every type and field (pins, declarations, vendor permits,
//! names, map keys), including fields added later, with no list of fields
//! to keep in step by hand. A hand-kept list once missed the pins'
//! library version, declarations and vendor permits.

use serde::Serialize;
use serde::ser;
use std::fmt;

/// Why a walk stopped.
#[derive(Debug)]
pub(super) enum Stop {
    /// A string of this many bytes, over the limit.
    TooLong(u64),
    /// A `Serialize` impl failed (none of the trace's types can).
    Failed(String),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::TooLong(n) => write!(f, "a string of {n} bytes"),
            Stop::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Stop {}

impl ser::Error for Stop {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Stop::Failed(msg.to_string())
    }
}

/// Walks `value`, stopping at the first string longer than `limit` bytes.
pub(super) fn check<T: Serialize + ?Sized>(value: &T, limit: u64) -> Result<(), Stop> {
    value.serialize(&mut Walker { limit })
}

struct Walker {
    limit: u64,
}

type Done = Result<(), Stop>;

impl ser::Serializer for &mut Walker {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn is_human_readable(&self) -> bool {
        // As the file codec: digests are bytes, not hex strings.
        false
    }

    fn serialize_str(self, v: &str) -> Done {
        if v.len() as u64 > self.limit {
            return Err(Stop::TooLong(v.len() as u64));
        }
        Ok(())
    }

    fn serialize_bool(self, _: bool) -> Done {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Done {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Done {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Done {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Done {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Done {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Done {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Done {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Done {
        Ok(())
    }
    fn serialize_f32(self, _: f32) -> Done {
        Ok(())
    }
    fn serialize_f64(self, _: f64) -> Done {
        Ok(())
    }
    fn serialize_char(self, _: char) -> Done {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Done {
        Ok(())
    }
    fn serialize_none(self) -> Done {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Done {
        v.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Stop> {
        Ok(self)
    }
}

/// Sequences, tuples and their variants: every element.
macro_rules! elements {
    ($($trait:ident :: $method:ident),+) => {$(
        impl ser::$trait for &mut Walker {
            type Ok = ();
            type Error = Stop;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Done {
                v.serialize(&mut **self)
            }
            fn end(self) -> Done {
                Ok(())
            }
        }
    )+};
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// Structs and their variants: every field's value.
macro_rules! fields {
    ($($trait:ident),+) => {$(
        impl ser::$trait for &mut Walker {
            type Ok = ();
            type Error = Stop;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, v: &T) -> Done {
                v.serialize(&mut **self)
            }
            fn end(self) -> Done {
                Ok(())
            }
        }
    )+};
}

fields!(SerializeStruct, SerializeStructVariant);

impl ser::SerializeMap for &mut Walker {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Done {
        k.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Done {
        v.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::RecordedGemmTrace;
    use crate::declaration::{BkRule, SplitRule, SymbolDeclaration, VendorPermits};
    use crate::error::FormatError;
    use crate::physical::PhysicalNode;
    use crate::pin::VendorPin;
    use crate::trace::codec;
    use crate::trace::{Observation, ObservedRoute};
    use crate::vocab::OutputOwnership;

    type Edit = fn(&mut RecordedGemmTrace, String);

    /// A sample trace holding a string in every place a trace can: a pin,
    /// a declaration with vendor permits, a graph node, an observation.
    fn full() -> RecordedGemmTrace {
        let mut t = crate::testkit::sample_trace(2);
        let pin = VendorPin::of(&crate::testkit::sample_vendor_route(0)).unwrap();
        t.context = t.context.clone().with_pins(vec![pin]);
        let permits = VendorPermits {
            library_version: "lib 1".into(),
            max_split_k: -1,
            reduction_schemes: vec![-1],
            max_workspace_bytes: 0,
            configurations: Vec::new(),
        };
        let declaration = SymbolDeclaration::new(
            "scalar-fma",
            "1x1x1",
            OutputOwnership::OneOwnerPerElement,
            SplitRule::Unsplit,
            BkRule::PerSplit,
        )
        .with_capabilities(vec!["cap".into()])
        .with_vendor(permits);
        t.context.modules[0].symbols[0].declaration = Some(declaration);
        t.routes[0].device_capabilities = vec!["cap".into()];
        t.routes[0].vendor = crate::testkit::sample_vendor_route(0).vendor;
        t.physical = vec![PhysicalNode::kernel("k", [1, 1, 1], [1, 1, 1], 0)];
        let gemm = ObservedRoute {
            device: "cuda:0".into(),
            region: Some("step".into()),
            beside: vec!["copy".into()],
            ..ObservedRoute::default()
        };
        t.observation = Some(Observation {
            source: "torch".into(),
            file: "f.json".into(),
            unbound_listed: vec!["u".into()],
            gemms: vec![gemm.clone(), gemm],
            notes: vec!["n".into()],
            ..Observation::default()
        });
        t
    }

    fn decl(t: &mut RecordedGemmTrace) -> &mut SymbolDeclaration {
        t.context.modules[0].symbols[0]
            .declaration
            .as_mut()
            .unwrap()
    }

    fn obs(t: &mut RecordedGemmTrace) -> &mut Observation {
        t.observation.as_mut().unwrap()
    }

    /// Every place a trace holds a string, by name.
    const PLACES: &[(&str, Edit)] = &[
        ("workload", |t, s| t.workload = s),
        ("volatile key", |t, s| {
            drop(t.volatile.insert(s, "v".into()))
        }),
        ("volatile value", |t, s| {
            drop(t.volatile.insert("k".into(), s))
        }),
        ("route gemm", |t, s| t.routes[0].gemm = s),
        ("route instruction family", |t, s| {
            t.routes[0].instruction_family = s
        }),
        ("route instruction shape", |t, s| {
            t.routes[0].instruction_shape = s
        }),
        ("route kernel symbol", |t, s| t.routes[0].kernel_symbol = s),
        ("route target", |t, s| t.routes[0].compilation_target = s),
        ("route compiler name", |t, s| t.routes[0].compiler.name = s),
        ("route compiler version", |t, s| {
            t.routes[0].compiler.version = s
        }),
        ("route device class", |t, s| t.routes[0].device.class = s),
        ("route device driver", |t, s| t.routes[0].device.driver = s),
        ("route capability", |t, s| {
            t.routes[0].device_capabilities[0] = s
        }),
        ("route vendor library", |t, s| {
            t.routes[0].vendor.as_mut().unwrap().library_version = s
        }),
        ("route vendor kernel", |t, s| {
            t.routes[0].vendor.as_mut().unwrap().physical_kernels = vec![s]
        }),
        ("context device class", |t, s| t.context.device.class = s),
        ("context device driver", |t, s| t.context.device.driver = s),
        ("module compiler name", |t, s| {
            t.context.modules[0].compiler.name = s
        }),
        ("module compiler version", |t, s| {
            t.context.modules[0].compiler.version = s
        }),
        ("module target", |t, s| t.context.modules[0].target = s),
        ("symbol name", |t, s| {
            t.context.modules[0].symbols[0].name = s
        }),
        ("declaration instruction family", |t, s| {
            decl(t).instruction_family = s
        }),
        ("declaration instruction shape", |t, s| {
            decl(t).instruction_shape = s
        }),
        ("declaration capability", |t, s| {
            decl(t).device_capabilities[0] = s
        }),
        ("vendor permits library", |t, s| {
            decl(t).vendor.as_mut().unwrap().library_version = s
        }),
        ("pin library", |t, s| {
            t.context.pins[0].family.library_version = s
        }),
        ("graph node symbol", |t, s| t.physical[0].symbol = Some(s)),
        ("observation source", |t, s| obs(t).source = s),
        ("observation file", |t, s| obs(t).file = s),
        ("observation unbound", |t, s| obs(t).unbound_listed[0] = s),
        ("observation note", |t, s| obs(t).notes[0] = s),
        ("observed device", |t, s| obs(t).gemms[0].device = s),
        ("observed region", |t, s| obs(t).gemms[0].region = Some(s)),
        ("observed beside", |t, s| obs(t).gemms[1].beside[0] = s),
        ("observed graph", |t, s| obs(t).gemms[1].graph = Some(s)),
    ];

    /// One byte over the limit in any place a trace holds a string is
    /// refused by the writer and, in bytes made past it, by the reader;
    /// exactly at the limit in every place is accepted.
    #[test]
    fn every_string_a_trace_holds_is_under_the_limit() {
        let limit = codec::Limits::default().max_string_bytes;
        let mut at = full();
        for (_, edit) in PLACES {
            edit(&mut at, "a".repeat(limit as usize));
        }
        let bytes = at.to_bytes().expect("at the limit everywhere");
        assert_eq!(RecordedGemmTrace::from_bytes(&bytes).unwrap(), at);
        let over = FormatError::LimitExceeded {
            what: "string length",
            found: limit + 1,
            limit,
        };
        for (place, edit) in PLACES {
            let mut t = full();
            edit(&mut t, "a".repeat(limit as usize + 1));
            assert_eq!(t.to_bytes().err(), Some(over.clone()), "{place}: written");
            let forged = codec::seal(&codec::encode_payload(&t).unwrap());
            assert_eq!(
                RecordedGemmTrace::from_bytes(&forged).err(),
                Some(over.clone()),
                "{place}: read"
            );
        }
    }
}
