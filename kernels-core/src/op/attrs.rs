//! Attribute values given as `name=value` strings: parsing and validation.

use alloc::format;

use crate::error::{Error, Result};

fn parse_bool(op: &'static str, attr: &'static str, v: &str) -> Result<bool> {
    match v {
        "true" | "1" | "True" => Ok(true),
        "false" | "0" | "False" => Ok(false),
        _ => Err(Error::BadAttr {
            op,
            attr,
            value: v.into(),
            why: "expected true or false".into(),
        }),
    }
}

fn parse_f32(op: &'static str, attr: &'static str, v: &str) -> Result<f32> {
    let x: f32 = v.trim().parse().map_err(|_| Error::BadAttr {
        op,
        attr,
        value: v.into(),
        why: "expected a number".into(),
    })?;
    if !x.is_finite() {
        return Err(Error::BadAttr {
            op,
            attr,
            value: v.into(),
            why: "must be finite".into(),
        });
    }
    Ok(x)
}

fn parse_u64(op: &'static str, attr: &'static str, v: &str) -> Result<u64> {
    v.trim().parse().map_err(|_| Error::BadAttr {
        op,
        attr,
        value: v.into(),
        why: "expected a non-negative integer".into(),
    })
}

/// Attribute values as given by a user (`name=value` strings).
pub(super) struct Attrs<'a> {
    pub(super) op: &'static str,
    pub(super) given: &'a [(&'a str, &'a str)],
}

impl Attrs<'_> {
    pub(super) fn raw(&self, name: &str) -> Option<&str> {
        self.given
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
    }
    pub(super) fn bool(&self, name: &'static str, default: bool) -> Result<bool> {
        self.raw(name)
            .map_or(Ok(default), |v| parse_bool(self.op, name, v))
    }
    pub(super) fn f32(&self, name: &'static str, default: Option<f32>) -> Result<f32> {
        match (self.raw(name), default) {
            (Some(v), _) => parse_f32(self.op, name, v),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(Error::MissingAttr {
                op: self.op,
                attr: name,
            }),
        }
    }
    pub(super) fn u64(&self, name: &'static str, default: Option<u64>) -> Result<u64> {
        match (self.raw(name), default) {
            (Some(v), _) => parse_u64(self.op, name, v),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(Error::MissingAttr {
                op: self.op,
                attr: name,
            }),
        }
    }
    pub(super) fn positive_f32(&self, name: &'static str, default: Option<f32>) -> Result<f32> {
        let x = self.f32(name, default)?;
        if x <= 0.0 {
            return Err(Error::BadAttr {
                op: self.op,
                attr: name,
                value: format!("{x}"),
                why: "must be > 0".into(),
            });
        }
        Ok(x)
    }
    pub(super) fn unit_f32(&self, name: &'static str, default: f32) -> Result<f32> {
        let x = self.f32(name, Some(default))?;
        if !(0.0..1.0).contains(&x) {
            return Err(Error::BadAttr {
                op: self.op,
                attr: name,
                value: format!("{x}"),
                why: "must be in [0, 1)".into(),
            });
        }
        Ok(x)
    }
}
