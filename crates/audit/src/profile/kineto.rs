//! Reading a PyTorch profiler (Kineto) Chrome trace.
//!
//! The file is JSON, or gzip'd JSON (`tensorboard_trace_handler(...,
//! use_gzip=True)`): an object whose `traceEvents` holds the events, or a
//! bare list of events (the Chrome trace format allows both). The parser
//! reads the whole file once, without building a JSON tree: each event is
//! deserialized into a small struct that borrows its strings from the
//! file's bytes, and only the events the binder needs are kept (CPU ranges,
//! launching runtime and driver calls, GPU activities and flow ends).
//! Everything else is checked to be JSON and dropped.

use super::ProfileError;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// What an event is, by its `cat` (the categories torch 1.8 to 2.x and
/// older Kineto builds write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cat {
    /// An operator (`cpu_op`; `Operator` in older traces).
    CpuOp,
    /// A `record_function` range (`user_annotation`).
    Annotation,
    /// A Python function (`python_function`, with `with_stack=True`).
    Python,
    /// A CUDA runtime or driver call (`cuda_runtime`, `cuda_driver`;
    /// `Runtime` in older traces).
    Runtime,
    /// A GPU kernel.
    Kernel,
    /// A GPU memory copy.
    Memcpy,
    /// A GPU memory fill.
    Memset,
    /// The end of a CPU-to-GPU flow arrow (`ac2g`, phase `f`).
    FlowEnd,
}

impl Cat {
    fn of(cat: &str, ph: &str) -> Option<Cat> {
        const NAMES: [(&str, Cat); 12] = [
            ("cpu_op", Cat::CpuOp),
            ("kernel", Cat::Kernel),
            ("cuda_runtime", Cat::Runtime),
            ("cuda_driver", Cat::Runtime),
            ("user_annotation", Cat::Annotation),
            ("gpu_memcpy", Cat::Memcpy),
            ("gpu_memset", Cat::Memset),
            ("python_function", Cat::Python),
            ("operator", Cat::CpuOp),
            ("runtime", Cat::Runtime),
            ("hip_runtime", Cat::Runtime),
            ("memcpy", Cat::Memcpy),
        ];
        if cat.eq_ignore_ascii_case("ac2g") {
            return (ph == "f").then_some(Cat::FlowEnd);
        }
        if cat.eq_ignore_ascii_case("memset") {
            return Some(Cat::Memset);
        }
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(cat))
            .map(|(_, c)| *c)
    }

    /// A GPU activity (kernel, copy or fill).
    pub(crate) fn is_activity(self) -> bool {
        matches!(self, Cat::Kernel | Cat::Memcpy | Cat::Memset)
    }

    /// A CPU range a launch can sit in.
    pub(crate) fn is_range(self) -> bool {
        matches!(self, Cat::CpuOp | Cat::Annotation | Cat::Python)
    }
}

/// A process or thread id: Kineto writes numbers, and strings for its
/// own rows (`"Spans"`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Id<'a> {
    Num(i64),
    Str(Cow<'a, str>),
}

impl fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Num(n) => write!(f, "{n}"),
            Id::Str(s) => write!(f, "{s:?}"),
        }
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Id<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id<'de>, E> {
                Ok(Id::Num(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id<'de>, E> {
                i64::try_from(v)
                    .map(Id::Num)
                    .map_err(|_| E::custom(format!("id {v} is out of range")))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Id<'de>, E> {
                Ok(Id::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id<'de>, E> {
                Ok(Id::Str(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of integers (`Input Dims` / `Input Strides` entries, `grid`).
/// Anything else in its place (a nested list for a tensor list, a string)
/// is read as absent rather than refused: it is valid Kineto.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Ints(pub Option<Vec<i64>>);

impl<'de> serde::Deserialize<'de> for Ints {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ints;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of integers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ints, A::Error> {
                let mut out = Vec::new();
                let mut ok = true;
                while let Some(x) = seq.next_element::<IntOrOther>()? {
                    match x.0 {
                        Some(v) if ok => out.push(v),
                        _ => ok = false,
                    }
                }
                Ok(Ints(ok.then_some(out)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ints, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Ints(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Ints, E> {
                Ok(Ints(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Ints, E> {
                Ok(Ints(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Ints, E> {
                Ok(Ints(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Ints, E> {
                Ok(Ints(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Ints, E> {
                Ok(Ints(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Ints, E> {
                Ok(Ints(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string borrowed from the file's text where it holds no escape
/// (serde's own `Cow<str>` always copies).
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// One element of an [`Ints`] list: an integer, or anything else (which
/// makes the list absent).
struct IntOrOther(Option<i64>);

impl<'de> serde::Deserialize<'de> for IntOrOther {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IntOrOther;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrOther, E> {
                Ok(IntOrOther(Some(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrOther, E> {
                Ok(IntOrOther(i64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<IntOrOther, E> {
                Ok(IntOrOther(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<IntOrOther, E> {
                Ok(IntOrOther(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<IntOrOther, E> {
                Ok(IntOrOther(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<IntOrOther, E> {
                Ok(IntOrOther(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IntOrOther, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IntOrOther(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IntOrOther, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(IntOrOther(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of strings (`Input type`, `Concrete Inputs`); anything that is
/// not a string reads as the empty string.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Strs<'a>(pub Vec<Cow<'a, str>>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Strs<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Strs<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strs<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<StrOrOther<'de>>()? {
                    out.push(s.0);
                }
                Ok(Strs(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strs<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Strs::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Strs<'de>, E> {
                Ok(Strs::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Strs<'de>, E> {
                Ok(Strs::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Strs<'de>, E> {
                Ok(Strs::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Strs<'de>, E> {
                Ok(Strs::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Strs<'de>, E> {
                Ok(Strs::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Strs<'de>, E> {
                Ok(Strs::default())
            }
        }
        d.deserialize_any(V)
    }
}

struct StrOrOther<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for StrOrOther<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrOrOther<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(StrOrOther(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StrOrOther(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(StrOrOther(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(StrOrOther(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(StrOrOther(Cow::Owned(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(StrOrOther(Cow::Owned(v.to_string())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(StrOrOther(Cow::Borrowed("")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(StrOrOther(Cow::Borrowed("")))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(StrOrOther(Cow::Borrowed("")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of [`Ints`] (`Input Dims`, `Input Strides`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(transparent)]
pub(crate) struct IntLists(pub Vec<Ints>);

/// The `args` of an event: the keys the binder reads (an op's inputs
/// kept as unparsed text until the op turns out to be a GEMM); every other
/// key is skipped.
#[derive(Debug, Default, serde::Deserialize)]
struct RawArgs<'a> {
    #[serde(default)]
    correlation: Option<u64>,
    #[serde(default)]
    grid: Option<Dims3>,
    #[serde(default)]
    block: Option<Dims3>,
    #[serde(default, rename = "shared memory")]
    shared_memory: Option<u64>,
    #[serde(default)]
    device: Option<i64>,
    #[serde(default, rename = "Input Dims", borrow)]
    input_dims: Option<&'a serde_json::value::RawValue>,
    #[serde(default, rename = "Input Strides", borrow)]
    input_strides: Option<&'a serde_json::value::RawValue>,
    #[serde(default, rename = "Input type", borrow)]
    input_types: Option<&'a serde_json::value::RawValue>,
    #[serde(default, rename = "Concrete Inputs", borrow)]
    concrete_inputs: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    kernel_backend: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    num_warps: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    num_stages: Option<&'a serde_json::value::RawValue>,
}

/// Up to three launch dimensions (`grid`, `block`); missing ones are 0,
/// and a value that is not a small non-negative integer reads as 0.
#[derive(Debug, Clone, Copy, Default)]
struct Dims3([u32; 3]);

impl<'de> serde::Deserialize<'de> for Dims3 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dims3;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of launch dimensions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dims3, A::Error> {
                let mut out = [0u32; 3];
                let mut i = 0;
                while let Some(x) = seq.next_element::<IntOrOther>()? {
                    if i < 3 {
                        out[i] = x.0.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
                    }
                    i += 1;
                }
                Ok(Dims3(out))
            }
        }
        d.deserialize_seq(V)
    }
}

/// What the profiler recorded of an op's inputs (`record_shapes=True`).
#[derive(Debug, Default)]
pub(crate) struct OpArgs<'a> {
    pub input_dims: Option<IntLists>,
    pub input_strides: Option<IntLists>,
    pub input_types: Option<Strs<'a>>,
    pub concrete_inputs: Option<Strs<'a>>,
}

/// A GEMM-family op's (or a Triton launch range's) recorded inputs, still
/// as the file's text: parsed ([`RawInputs::parse`]) only for the ops that
/// become GEMMs, one at a time, so a profile of many GEMMs never holds them
/// all parsed.
#[derive(Debug, Default)]
pub(crate) struct RawInputs<'a> {
    dims: Option<&'a serde_json::value::RawValue>,
    strides: Option<&'a serde_json::value::RawValue>,
    types: Option<&'a serde_json::value::RawValue>,
    concrete: Option<&'a serde_json::value::RawValue>,
    /// A Triton launch range's `kernel_backend`, `num_warps`, `num_stages`.
    launch: [Option<&'a serde_json::value::RawValue>; 3],
}

/// What a Triton launch range records of its launch, each value as text
/// (a JSON string's content, any other value as written).
#[derive(Debug, Default)]
pub(crate) struct LaunchConfig {
    pub backend: Option<String>,
    pub num_warps: Option<String>,
    pub num_stages: Option<String>,
}

impl<'a> RawInputs<'a> {
    /// The inputs parsed, or which field is malformed and how.
    pub(crate) fn parse(&self) -> Result<OpArgs<'a>, String> {
        fn one<'a, T: serde::Deserialize<'a>>(
            field: &str,
            raw: Option<&'a serde_json::value::RawValue>,
        ) -> Result<Option<T>, String> {
            raw.map(|r| serde_json::from_str(r.get()).map_err(|e| format!("{field}: {e}")))
                .transpose()
        }
        Ok(OpArgs {
            input_dims: one("Input Dims", self.dims)?,
            input_strides: one("Input Strides", self.strides)?,
            input_types: one("Input type", self.types)?,
            concrete_inputs: one("Concrete Inputs", self.concrete)?,
        })
    }

    /// A Triton launch range's backend and launch configuration.
    pub(crate) fn launch(&self) -> LaunchConfig {
        let text = |raw: Option<&serde_json::value::RawValue>| {
            raw.map(|r| match serde_json::from_str::<String>(r.get()) {
                Ok(s) => s,
                Err(_) => r.get().trim().to_string(),
            })
        };
        let [backend, num_warps, num_stages] = self.launch;
        LaunchConfig {
            backend: text(backend),
            num_warps: text(num_warps),
            num_stages: text(num_stages),
        }
    }
}

/// A JSON number as Kineto writes it: an integer, or a float (timestamps
/// in microseconds with a fraction). Strings and other values are kept as
/// "not a number" so the event that holds one can be named.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
    Other,
}

impl Number {
    /// A non-negative integer (ids, sizes); floats with no fraction too.
    pub(crate) fn as_u64(self) -> Option<u64> {
        match self {
            Number::Int(i) => u64::try_from(i).ok(),
            Number::Float(f) if f >= 0.0 && f.fract() == 0.0 && f < 1.8e19 => Some(f as u64),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(i64::try_from(v).map_or(Number::Float(v as f64), Number::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number::Float(v))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Number, E> {
                Ok(Number::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Number, E> {
                Ok(Number::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Number, E> {
                Ok(Number::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Number, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Number::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Number, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Number::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// One event as written. Its `args` are parsed only when the event is one
/// the binder needs: Kineto writes `cat` and `name` before `args`, so most
/// events' arguments are skipped unread; where they come first, they are
/// kept as text until the category is known.
#[derive(Debug, Default)]
struct RawEvent<'a> {
    ph: Option<Cow<'a, str>>,
    cat: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
    pid: Option<Id<'a>>,
    tid: Option<Id<'a>>,
    ts: Option<f64>,
    dur: Option<f64>,
    id: Option<Number>,
    args: Option<RawArgs<'a>>,
    args_text: Option<&'a serde_json::value::RawValue>,
}

/// Whether an event of this category and name needs its `args`.
fn wants_args(cat: Option<&str>, ph: Option<&str>, name: Option<&str>) -> Option<bool> {
    let c = Cat::of(cat?, ph.unwrap_or(""))?;
    Some(match c {
        Cat::Runtime | Cat::Kernel | Cat::Memcpy | Cat::Memset => true,
        Cat::CpuOp => {
            let name = name?;
            super::ops::op_kind(name).is_some() || super::triton::may_be_launch(name)
        }
        Cat::Annotation | Cat::Python | Cat::FlowEnd => false,
    })
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for RawEvent<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawEvent<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a trace event (an object)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEvent<'a>, A::Error> {
                let mut e = RawEvent::default();
                fn once<T, E: de::Error>(slot: &mut Option<T>, v: T, key: &str) -> Result<(), E> {
                    if slot.is_some() {
                        return Err(E::custom(format!("duplicate field `{key}`")));
                    }
                    *slot = Some(v);
                    Ok(())
                }
                /// The value of `key`, an error naming the field when it
                /// is of the wrong type.
                fn field<'de, A: MapAccess<'de>, T: serde::Deserialize<'de>>(
                    map: &mut A,
                    key: &str,
                ) -> Result<T, A::Error> {
                    map.next_value()
                        .map_err(|e| de::Error::custom(format!("field `{key}`: {e}")))
                }
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    match key.as_ref() {
                        "ph" => once(&mut e.ph, field::<_, Text>(&mut map, "ph")?.0, "ph")?,
                        "cat" => once(&mut e.cat, field::<_, Text>(&mut map, "cat")?.0, "cat")?,
                        "name" => once(&mut e.name, field::<_, Text>(&mut map, "name")?.0, "name")?,
                        "pid" => once(&mut e.pid, field(&mut map, "pid")?, "pid")?,
                        "tid" => once(&mut e.tid, field(&mut map, "tid")?, "tid")?,
                        "ts" => once(&mut e.ts, field(&mut map, "ts")?, "ts")?,
                        "dur" => once(&mut e.dur, field(&mut map, "dur")?, "dur")?,
                        "id" => once(&mut e.id, field(&mut map, "id")?, "id")?,
                        "args" => {
                            if e.args.is_some() || e.args_text.is_some() {
                                return Err(de::Error::custom("duplicate field `args`"));
                            }
                            match wants_args(e.cat.as_deref(), e.ph.as_deref(), e.name.as_deref()) {
                                Some(true) => e.args = Some(field(&mut map, "args")?),
                                Some(false) => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                                None => e.args_text = Some(map.next_value()?),
                            }
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(e)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// An event the binder needs, checked (its timestamps are finite and not
/// negative, and it has the fields its kind must have) and kept small:
/// strings borrow from the file's text, the thread is an index into
/// [`Parsed::threads`], and only a GEMM op or a Triton launch range
/// keeps its inputs.
#[derive(Debug)]
pub(crate) struct Event<'a> {
    /// Its position among `traceEvents`, for messages.
    pub index: u64,
    pub cat: Cat,
    pub name: Cow<'a, str>,
    /// Its (pid, tid), an index into [`Parsed::threads`].
    pub thread: u32,
    /// Start, in microseconds.
    pub ts: f64,
    /// Duration, in microseconds (0 for flow ends).
    pub dur: f64,
    /// The correlation id of a launching call or an activity; the flow id
    /// of a flow end.
    pub correlation: Option<u64>,
    /// What only some kinds carry: an activity's launch, a GEMM op's
    /// inputs (boxed, so the many events without either stay small).
    pub extra: Option<Box<Extra<'a>>>,
}

/// What only some events carry.
#[derive(Debug)]
pub(crate) enum Extra<'a> {
    /// A GPU activity's launch and device.
    Activity(Activity),
    /// A GEMM-family op's recorded inputs.
    Inputs(RawInputs<'a>),
}

/// A GPU activity's launch geometry and device.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Activity {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_memory: u32,
    pub device: Option<i64>,
}

impl<'a> Event<'a> {
    /// An activity's launch (the default for other events).
    pub(crate) fn activity(&self) -> Activity {
        match self.extra.as_deref() {
            Some(Extra::Activity(a)) => *a,
            _ => Activity::default(),
        }
    }

    /// A GEMM-family op's recorded inputs.
    pub(crate) fn inputs(&self) -> Option<&RawInputs<'a>> {
        match self.extra.as_deref() {
            Some(Extra::Inputs(i)) => Some(i),
            _ => None,
        }
    }
}

/// One entry of `deviceProperties`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub(crate) struct DeviceProperties {
    #[serde(default)]
    pub id: Option<Number>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, rename = "computeMajor")]
    pub compute_major: Option<Number>,
    #[serde(default, rename = "computeMinor")]
    pub compute_minor: Option<Number>,
    #[serde(default, rename = "numSms")]
    pub num_sms: Option<Number>,
}

/// `distributedInfo`: the job's backend, this rank and the world size.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub(crate) struct DistributedInfo {
    #[serde(default)]
    pub rank: Option<Number>,
    #[serde(default)]
    pub world_size: Option<Number>,
}

/// What a profile says about where it was taken, beside its events.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meta {
    pub device_properties: Vec<DeviceProperties>,
    pub distributed: Option<DistributedInfo>,
    pub cuda_runtime_version: Option<Number>,
    pub cuda_driver_version: Option<Number>,
    pub cupti_version: Option<Number>,
    pub hip_runtime_version: Option<Number>,
    pub schema_version: Option<Number>,
}

/// A parsed profile: its metadata and the events the binder needs, in the
/// file's order.
#[derive(Debug, Default)]
pub(crate) struct Parsed<'a> {
    pub meta: Meta,
    pub events: Vec<Event<'a>>,
    /// Every (pid, tid) an event names, in first-seen order.
    pub threads: Vec<(Id<'a>, Id<'a>)>,
    thread_index: std::collections::HashMap<(Id<'a>, Id<'a>), u32>,
    /// Every event of the file, kept or not.
    pub total_events: u64,
    /// Whether the file held `traceEvents` (or was a bare list of events).
    pub saw_events: bool,
}

/// Limits on what a profile may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParseLimits {
    /// Most events.
    pub max_events: u64,
}

/// Parses `bytes` (JSON, already decompressed).
pub(crate) fn parse<'a>(bytes: &'a [u8], limits: ParseLimits) -> Result<Parsed<'a>, ProfileError> {
    // Checked as UTF-8 once, in one fast pass, so the parser need not check
    // each string again.
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        let column = (at
            - bytes[..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1)) as u64
            + 1;
        ProfileError::Json {
            line,
            column,
            message: format!("byte {at} is not UTF-8"),
        }
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let mut parsed = Parsed::default();
    // Kineto's events take 200 to 400 bytes of text each: reserve for the
    // kept ones once rather than regrow (and copy) the list as it fills.
    parsed.events.reserve(bytes.len() / 320);
    let mut failure: Option<ProfileError> = None;
    let result = TopLevel {
        out: &mut parsed,
        failure: &mut failure,
        limits,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    if let Some(f) = failure {
        return Err(f);
    }
    result.map_err(|e| {
        let message = strip_position(&e.to_string());
        if e.is_data() {
            // Valid JSON holding the wrong thing.
            ProfileError::NotKineto(format!(
                "line {} column {}: {message}",
                e.line(),
                e.column()
            ))
        } else {
            ProfileError::Json {
                line: e.line() as u64,
                column: e.column() as u64,
                message,
            }
        }
    })?;
    if !parsed.saw_events {
        return Err(ProfileError::NotKineto(
            "the JSON has no \"traceEvents\" list (a PyTorch profiler trace is an object with \"traceEvents\", or a list of events)".into(),
        ));
    }
    Ok(parsed)
}

/// serde_json's message without its trailing ` at line L column C`, which
/// the error carries separately.
fn strip_position(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}

struct TopLevel<'p, 'a> {
    out: &'p mut Parsed<'a>,
    failure: &'p mut Option<ProfileError>,
    limits: ParseLimits,
}

impl<'de, 'p> DeserializeSeed<'de> for TopLevel<'p, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'p> Visitor<'de> for TopLevel<'p, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a PyTorch profiler trace: an object with \"traceEvents\", or a list of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.out.saw_events = true;
        EventList {
            out: self.out,
            failure: self.failure,
            limits: self.limits,
        }
        .visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match key.as_ref() {
                "traceEvents" => {
                    if self.out.saw_events {
                        return Err(de::Error::custom("\"traceEvents\" appears twice"));
                    }
                    self.out.saw_events = true;
                    map.next_value_seed(EventList {
                        out: self.out,
                        failure: self.failure,
                        limits: self.limits,
                    })?;
                }
                "deviceProperties" => {
                    self.out.meta.device_properties = map
                        .next_value::<Option<Vec<DeviceProperties>>>()?
                        .unwrap_or_default();
                }
                "distributedInfo" => {
                    self.out.meta.distributed = map.next_value::<Option<DistributedInfo>>()?;
                }
                "cuda_runtime_version" => {
                    self.out.meta.cuda_runtime_version = map.next_value()?;
                }
                "cuda_driver_version" => self.out.meta.cuda_driver_version = map.next_value()?,
                "cupti_version" => self.out.meta.cupti_version = map.next_value()?,
                "hip_runtime_version" => self.out.meta.hip_runtime_version = map.next_value()?,
                "schemaVersion" => self.out.meta.schema_version = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct EventList<'p, 'a> {
    out: &'p mut Parsed<'a>,
    failure: &'p mut Option<ProfileError>,
    limits: ParseLimits,
}

impl<'de, 'p> DeserializeSeed<'de> for EventList<'p, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, 'p> Visitor<'de> for EventList<'p, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            let index = self.out.total_events;
            let raw = match seq.next_element::<RawEvent<'de>>() {
                Ok(Some(raw)) => raw,
                Ok(None) => break,
                Err(e) => {
                    return Err(de::Error::custom(format!(
                        "trace event {index}: {}",
                        strip_position(&e.to_string())
                    )));
                }
            };
            self.out.total_events += 1;
            if self.out.total_events > self.limits.max_events {
                *self.failure = Some(ProfileError::Limit {
                    what: "events",
                    limit: self.limits.max_events,
                });
                return Err(de::Error::custom("too many events"));
            }
            match checked(index, raw, self.out) {
                Ok(Some(e)) => self.out.events.push(e),
                Ok(None) => {}
                Err(f) => {
                    *self.failure = Some(f);
                    return Err(de::Error::custom("bad event"));
                }
            }
        }
        Ok(())
    }
}

/// The event if the binder needs it, checked; `None` for events of other
/// kinds (metadata, instants, flows' starts, categories it does not use).
fn checked<'a>(
    index: u64,
    raw: RawEvent<'a>,
    parsed: &mut Parsed<'a>,
) -> Result<Option<Event<'a>>, ProfileError> {
    let ph = raw.ph.as_deref().unwrap_or("");
    let Some(cat) = raw.cat.as_deref().and_then(|c| Cat::of(c, ph)) else {
        return Ok(None);
    };
    if cat != Cat::FlowEnd && ph != "X" {
        // Kineto writes complete events only; a begin/end pair or an
        // instant of these categories carries no range to bind.
        return Ok(None);
    }
    let name = raw.name.unwrap_or(Cow::Borrowed(""));
    let bad = |field: &'static str, why: String| ProfileError::Event {
        index,
        name: super::shorten_name(&name),
        field,
        why,
    };
    let pid = raw.pid.ok_or_else(|| bad("pid", "missing".into()))?;
    let tid = raw.tid.ok_or_else(|| bad("tid", "missing".into()))?;
    let ts = raw.ts.ok_or_else(|| bad("ts", "missing".into()))?;
    if !ts.is_finite() || ts < 0.0 {
        return Err(bad(
            "ts",
            format!("{ts} is not a time (finite, not negative)"),
        ));
    }
    let dur = match (cat, raw.dur) {
        (Cat::FlowEnd, _) => 0.0,
        (_, None) => return Err(bad("dur", "missing".into())),
        (_, Some(d)) => d,
    };
    if !dur.is_finite() || dur < 0.0 {
        return Err(bad(
            "dur",
            format!("{dur} is not a duration (finite, not negative)"),
        ));
    }
    let mut event = Event {
        index,
        cat,
        name: Cow::Borrowed(""),
        thread: 0,
        ts,
        dur,
        correlation: None,
        extra: None,
    };
    let args = match (raw.args, raw.args_text) {
        (Some(a), _) => a,
        (None, Some(text))
            if wants_args(raw.cat.as_deref(), Some(ph), Some(&name)) == Some(true) =>
        {
            serde_json::from_str(text.get()).map_err(|e| bad("args", e.to_string()))?
        }
        _ => RawArgs::default(),
    };
    match cat {
        Cat::FlowEnd => {
            event.correlation = Some(
                raw.id
                    .and_then(Number::as_u64)
                    .ok_or_else(|| bad("id", "missing or not a non-negative integer".into()))?,
            );
        }
        Cat::Runtime => event.correlation = args.correlation,
        Cat::Kernel | Cat::Memcpy | Cat::Memset => {
            event.correlation = args.correlation;
            event.extra = Some(Box::new(Extra::Activity(Activity {
                grid: args.grid.unwrap_or_default().0,
                block: args.block.unwrap_or_default().0,
                shared_memory: args
                    .shared_memory
                    .and_then(|v| u32::try_from(v).ok())
                    .unwrap_or(0),
                device: args.device.or(match &pid {
                    // Kineto's GPU rows: the pid is the device.
                    Id::Num(p) if (0..4096).contains(p) => Some(*p),
                    _ => None,
                }),
            })));
        }
        Cat::CpuOp
            if super::ops::op_kind(&name).is_some() || super::triton::may_be_launch(&name) =>
        {
            event.extra = Some(Box::new(Extra::Inputs(RawInputs {
                dims: args.input_dims,
                strides: args.input_strides,
                types: args.input_types,
                concrete: args.concrete_inputs,
                launch: [args.kernel_backend, args.num_warps, args.num_stages],
            })));
        }
        _ => {}
    }
    let key = (pid, tid);
    event.thread = match parsed.thread_index.get(&key) {
        Some(&t) => t,
        None => {
            let t = u32::try_from(parsed.threads.len())
                .map_err(|_| bad("tid", "too many threads".into()))?;
            parsed.threads.push(key.clone());
            parsed.thread_index.insert(key, t);
            t
        }
    };
    event.name = name;
    Ok(Some(event))
}
