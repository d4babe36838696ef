//! Attribute values: the types an op's attributes have ([`AttrType`]), parsing them from
//! `name=value` strings, the checks the declaration names, and the choice enums.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::spec::{AttrKind, AttrValue};
use crate::error::{Error, Result};

fn bad(op: &'static str, attr: &'static str, value: String, why: &str) -> Error {
    Error::BadAttr {
        op,
        attr,
        value,
        why: why.into(),
    }
}

fn parse_bool(op: &'static str, attr: &'static str, v: &str) -> Result<bool> {
    match v {
        "true" | "1" | "True" => Ok(true),
        "false" | "0" | "False" => Ok(false),
        _ => Err(bad(op, attr, v.into(), "expected true or false")),
    }
}

fn parse_f32(op: &'static str, attr: &'static str, v: &str) -> Result<f32> {
    let x: f32 = v
        .trim()
        .parse()
        .map_err(|_| bad(op, attr, v.into(), "expected a number"))?;
    if !x.is_finite() {
        return Err(bad(op, attr, v.into(), "must be finite"));
    }
    Ok(x)
}

fn parse_u64(op: &'static str, attr: &'static str, v: &str) -> Result<u64> {
    v.trim()
        .parse()
        .map_err(|_| bad(op, attr, v.into(), "expected a non-negative integer"))
}

/// The Rust type of an attribute field of [`super::Op`]: how it is listed, published and parsed.
pub(super) trait AttrType: Sized {
    /// What a string parses to, before the declared check and [`AttrType::narrow`] (`u64` for
    /// `usize`, so a check sees the value as given).
    type Wide;
    /// How the declaration writes a default: `f64` for `f32` attributes, so the published default
    /// is the declared decimal (`1e-5`, not `9.99999974737875e-6`); the type itself otherwise.
    type Lit;
    const KIND: AttrKind;
    fn parse(op: &'static str, attr: &'static str, raw: &str) -> Result<Self::Wide>;
    fn narrow(op: &'static str, attr: &'static str, wide: Self::Wide) -> Result<Self>;
    /// The published default ([`super::AttrDefault::Value`]).
    fn publish(lit: Self::Lit) -> AttrValue;
    /// The value as listed by [`super::Op::attrs`]; `None` leaves the attribute out.
    fn value(self) -> Option<AttrValue>;
}

impl AttrType for bool {
    type Wide = bool;
    type Lit = bool;
    const KIND: AttrKind = AttrKind::Bool;
    fn parse(op: &'static str, attr: &'static str, raw: &str) -> Result<bool> {
        parse_bool(op, attr, raw)
    }
    fn narrow(_: &'static str, _: &'static str, wide: bool) -> Result<bool> {
        Ok(wide)
    }
    fn publish(lit: bool) -> AttrValue {
        AttrValue::Bool(lit)
    }
    fn value(self) -> Option<AttrValue> {
        Some(AttrValue::Bool(self))
    }
}

impl AttrType for f32 {
    type Wide = f32;
    type Lit = f64;
    const KIND: AttrKind = AttrKind::Float;
    fn parse(op: &'static str, attr: &'static str, raw: &str) -> Result<f32> {
        parse_f32(op, attr, raw)
    }
    fn narrow(_: &'static str, _: &'static str, wide: f32) -> Result<f32> {
        Ok(wide)
    }
    fn publish(lit: f64) -> AttrValue {
        AttrValue::Float(lit)
    }
    fn value(self) -> Option<AttrValue> {
        Some(AttrValue::Float(self as f64))
    }
}

/// An optional float whose default is derived from the inputs (`None` until given).
impl AttrType for Option<f32> {
    type Wide = f32;
    type Lit = f64;
    const KIND: AttrKind = AttrKind::Float;
    fn parse(op: &'static str, attr: &'static str, raw: &str) -> Result<f32> {
        parse_f32(op, attr, raw)
    }
    fn narrow(_: &'static str, _: &'static str, wide: f32) -> Result<Option<f32>> {
        Ok(Some(wide))
    }
    fn publish(lit: f64) -> AttrValue {
        AttrValue::Float(lit)
    }
    fn value(self) -> Option<AttrValue> {
        self.and_then(<f32 as AttrType>::value)
    }
}

impl AttrType for u64 {
    type Wide = u64;
    type Lit = u64;
    const KIND: AttrKind = AttrKind::Int;
    fn parse(op: &'static str, attr: &'static str, raw: &str) -> Result<u64> {
        parse_u64(op, attr, raw)
    }
    fn narrow(_: &'static str, _: &'static str, wide: u64) -> Result<u64> {
        Ok(wide)
    }
    fn publish(lit: u64) -> AttrValue {
        AttrValue::Int(lit)
    }
    fn value(self) -> Option<AttrValue> {
        Some(AttrValue::Int(self))
    }
}

impl AttrType for usize {
    type Wide = u64;
    type Lit = u64;
    const KIND: AttrKind = AttrKind::Int;
    fn parse(op: &'static str, attr: &'static str, raw: &str) -> Result<u64> {
        parse_u64(op, attr, raw)
    }
    fn narrow(op: &'static str, attr: &'static str, wide: u64) -> Result<usize> {
        usize::try_from(wide).map_err(|_| bad(op, attr, format!("{wide}"), "too large"))
    }
    fn publish(lit: u64) -> AttrValue {
        AttrValue::Int(lit)
    }
    fn value(self) -> Option<AttrValue> {
        Some(AttrValue::Int(self as u64))
    }
}

/// `"a, b or c"`.
fn either(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => String::from(*last),
        None => String::new(),
    }
}

/// A fieldless enum whose values are the strings of a [`AttrKind::Choice`] attribute.
macro_rules! choice {
    ($(#[$meta:meta])* $ty:ident { $($(#[$vmeta:meta])* $variant:ident = $name:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($(#[$vmeta])* $variant),+
        }

        impl $ty {
            /// Every value, in attribute order.
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];
            /// The attribute value.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl AttrType for $ty {
            type Wide = $ty;
            type Lit = $ty;
            const KIND: AttrKind = AttrKind::Choice(&[$($name),+]);
            fn parse(op: &'static str, attr: &'static str, raw: &str) -> Result<$ty> {
                $ty::ALL.into_iter().find(|x| x.name() == raw).ok_or_else(|| {
                    bad(op, attr, raw.into(), &format!("expected {}", either(&[$($name),+])))
                })
            }
            fn narrow(_: &'static str, _: &'static str, wide: $ty) -> Result<$ty> {
                Ok(wide)
            }
            fn publish(lit: $ty) -> AttrValue {
                AttrValue::Str(lit.name())
            }
            fn value(self) -> Option<AttrValue> {
                Some(AttrValue::Str(self.name()))
            }
        }
    };
}

choice! {
    /// `F.gelu`'s `approximate` argument.
    GeluApprox {
        None = "none",
        Tanh = "tanh",
    }
}

choice! {
    /// The activation fused into `linear`: those whose derivative is a function of the output, so
    /// the backward needs no pre-activation.
    Activation {
        None = "none",
        Relu = "relu",
        Tanh = "tanh",
        Sigmoid = "sigmoid",
    }
}

choice! {
    /// How `rope` scales its frequencies (Hugging Face's `rope_type`; `dynamic` is `none` with
    /// the base the model computes from the sequence length).
    RopeScaling {
        None = "none",
        Linear = "linear",
        Llama3 = "llama3",
        Yarn = "yarn",
    }
}

/// An attribute's value when it is not given.
pub(super) enum Fallback<T> {
    Required,
    Value(T),
}

/// Attribute values as given by a user (`name=value` strings).
pub(super) struct Attrs<'a> {
    pub(super) op: &'static str,
    pub(super) given: &'a [(&'a str, &'a str)],
}

/// What the declaration's `if <check>` names: a check (and possibly a clamp) of a given value.
pub(super) type Check<W> = fn(&'static str, &'static str, W) -> Result<W>;

impl Attrs<'_> {
    /// The last value given for `name`.
    fn raw(&self, name: &str) -> Option<&str> {
        self.given
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
    }

    /// Attribute `name`: parsed, checked and narrowed when given, else its fallback.
    pub(super) fn get<T: AttrType>(
        &self,
        name: &'static str,
        fallback: Fallback<T>,
        check: Check<T::Wide>,
    ) -> Result<T> {
        match (self.raw(name), fallback) {
            (Some(raw), _) => {
                let wide = check(self.op, name, T::parse(self.op, name, raw)?)?;
                T::narrow(self.op, name, wide)
            }
            (None, Fallback::Value(v)) => Ok(v),
            (None, Fallback::Required) => Err(Error::MissingAttr {
                op: self.op,
                attr: name,
            }),
        }
    }
}

/// The attributes that have a value, in declaration order.
pub(super) fn listed<const N: usize>(
    attrs: [(&'static str, Option<AttrValue>); N],
) -> Vec<(&'static str, AttrValue)> {
    attrs
        .into_iter()
        .filter_map(|(name, v)| v.map(|v| (name, v)))
        .collect()
}

// The checks the declaration names (`if positive`). A default is not checked (the tests parse
// every published default back).

/// No check.
pub(super) fn any<W>(_: &'static str, _: &'static str, x: W) -> Result<W> {
    Ok(x)
}

pub(super) fn positive(op: &'static str, attr: &'static str, x: f32) -> Result<f32> {
    if x <= 0.0 {
        return Err(bad(op, attr, format!("{x}"), "must be > 0"));
    }
    Ok(x)
}

/// In `[0, 1)` (AdamW's betas).
pub(super) fn unit_interval(op: &'static str, attr: &'static str, x: f32) -> Result<f32> {
    if !(0.0..1.0).contains(&x) {
        return Err(bad(op, attr, format!("{x}"), "must be in [0, 1)"));
    }
    Ok(x)
}

pub(super) fn at_least_one(op: &'static str, attr: &'static str, x: u64) -> Result<u64> {
    if x == 0 {
        return Err(bad(op, attr, "0".into(), "must be >= 1"));
    }
    Ok(x)
}

/// An optimizer step number (bias correction counts from 1).
pub(super) fn step_number(op: &'static str, attr: &'static str, x: u64) -> Result<u64> {
    if x == 0 {
        return Err(bad(op, attr, "0".into(), "steps count from 1"));
    }
    Ok(x)
}

/// At most [`crate::cpu::svd::MAX_POWER_ITERS`] (more power iterations than that buy nothing in
/// f32): a larger value is an error naming it, never a silent clamp.
pub(super) fn at_most_64(op: &'static str, attr: &'static str, x: u64) -> Result<u64> {
    let max = crate::cpu::svd::MAX_POWER_ITERS as u64;
    if x > max {
        return Err(bad(op, attr, format!("{x}"), "must be <= 64"));
    }
    Ok(x)
}
