//! The `tojson` filter as transformers defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
//! sort_keys=sort_keys)`. minijinja's own `tojson` escapes `<`, `>`, `&` and `'` for HTML and
//! writes `,` and `:` without spaces: tool definitions would render differently.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

struct Style {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

fn bad(why: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("tojson: {why}"))
}

/// `value | tojson(indent=None, separators=None, sort_keys=False, ensure_ascii=False)`.
pub fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<String, Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match (v.as_i64(), v.as_str()) {
            (Some(n), _) => Some(" ".repeat(usize::try_from(n.max(0)).unwrap_or(0))),
            (None, Some(s)) => Some(s.to_string()),
            _ => return Err(bad(format!("indent must be a number or a string, not {v}"))),
        },
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<String> = v
                .try_iter()?
                .map(|p| p.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| bad("separators must be two strings".into()))?;
            match <[String; 2]>::try_from(parts) {
                Ok([item, key]) => (item, key),
                Err(_) => return Err(bad("separators must be two strings".into())),
            }
        }
        // Python's defaults: no space before a newline when indenting.
        _ if indent.is_some() => (",".into(), ": ".into()),
        _ => (", ".into(), ": ".into()),
    };
    let style = Style {
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write(value, &style, 0, &mut out)?;
    Ok(out)
}

fn write(v: &Value, style: &Style, depth: usize, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => out.push_str(&float(f64::try_from(v.clone())?)),
        ValueKind::String => out.push_str(&string(v.as_str().unwrap_or(""), style)),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            container(('[', ']'), items.len(), style, depth, out, |i, out| {
                write(&items[i], style, depth + 1, out)
            })?;
        }
        ValueKind::Map => {
            let mut entries: Vec<(String, Value)> = Vec::new();
            for key in v.try_iter()? {
                let item = v.get_item(&key)?;
                let name = match key.kind() {
                    ValueKind::String => key.as_str().unwrap_or("").to_string(),
                    ValueKind::None => "null".into(),
                    ValueKind::Bool | ValueKind::Number => {
                        let mut s = String::new();
                        write(&key, style, 0, &mut s)?;
                        s
                    }
                    other => return Err(bad(format!("keys must be strings, not {other}"))),
                };
                entries.push((name, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            container(('{', '}'), entries.len(), style, depth, out, |i, out| {
                let (k, item) = &entries[i];
                out.push_str(&string(k, style));
                out.push_str(&style.key_sep);
                write(item, style, depth + 1, out)
            })?;
        }
        other => return Err(bad(format!("a {other} value is not JSON"))),
    }
    Ok(())
}

/// `[a, b]` or, indented, one item per line.
fn container(
    (open, close): (char, char),
    n: usize,
    style: &Style,
    depth: usize,
    out: &mut String,
    mut item: impl FnMut(usize, &mut String) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if n == 0 {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, d: usize| {
        if let Some(ind) = &style.indent {
            out.push('\n');
            out.push_str(&ind.repeat(d));
        }
    };
    for i in 0..n {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        newline(out, depth + 1);
        item(i, out)?;
    }
    newline(out, depth);
    out.push(close);
    Ok(())
}

/// A JSON string as Python writes it (`ensure_ascii`: non-ASCII as `\uXXXX`).
fn string(s: &str, style: &Style) -> String {
    let quoted = serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""));
    if !style.ensure_ascii {
        return quoted;
    }
    let mut out = String::new();
    for c in quoted.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// A float as Python's `repr`: `1.0`, `0.1`, `1e-07`, `1.5e+16`, `NaN`, `Infinity`.
fn float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let a = f.abs();
    if a == 0.0 || (1e-4..1e16).contains(&a) {
        let s = format!("{f}");
        return if s.contains('.') { s } else { format!("{s}.0") };
    }
    let s = format!("{f:e}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::float;

    #[test]
    fn floats_read_as_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e-7, "1e-07"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (0.0, "0.0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (f, want) in cases {
            assert_eq!(float(f), want, "{f}");
        }
    }
}
