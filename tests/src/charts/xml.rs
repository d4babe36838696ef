//! A small XML well-formedness check for the charts' SVG (the test needs no XML crate):
//! one root element, every tag closed in order, attributes quoted and unique, `&` only in
//! entities, no `<` in text or attribute values. Declarations and comments are skipped.

/// What a well-formed document holds.
#[derive(Debug, Clone, PartialEq)]
pub struct XmlSummary {
    pub root: String,
    /// Every element's name, in document order.
    pub elements: Vec<String>,
    /// The text of every element, concatenated per element, entities decoded.
    pub texts: Vec<String>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')
}

/// Decodes the entities of a text or attribute value; an error for a bare `&` or `<`.
fn decode(s: &str, at: usize) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(['&', '<']) {
        out.push_str(&rest[..i]);
        if rest[i..].starts_with('<') {
            return Err(format!("a bare '<' near byte {at}"));
        }
        let end = rest[i..]
            .find(';')
            .ok_or_else(|| format!("an unterminated entity near byte {at}"))?;
        let entity = &rest[i + 1..i + end];
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            e if e.starts_with("#x") => u32::from_str_radix(&e[2..], 16)
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| format!("a bad character reference &{e}; near byte {at}"))?,
            e if e.starts_with('#') => e[1..]
                .parse::<u32>()
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| format!("a bad character reference &{e}; near byte {at}"))?,
            e => return Err(format!("an unknown entity &{e}; near byte {at}")),
        };
        out.push(c);
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Checks that `doc` is well-formed XML.
pub fn check_well_formed(doc: &str) -> Result<XmlSummary, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut elements = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    let mut open_text: Vec<usize> = Vec::new();
    let mut root: Option<String> = None;
    let mut pos = 0;
    while pos < doc.len() {
        let rest = &doc[pos..];
        let Some(lt) = rest.find('<') else {
            if !rest.trim().is_empty() && stack.is_empty() {
                return Err(format!("text after the root element at byte {pos}"));
            }
            if !stack.is_empty() {
                return Err(format!("unclosed <{}>", stack.join("> <")));
            }
            break;
        };
        let text = &rest[..lt];
        if stack.is_empty() {
            if !text.trim().is_empty() {
                return Err(format!("text outside the root element at byte {pos}"));
            }
        } else if let Some(&i) = open_text.last() {
            let decoded = decode(text, pos)?;
            texts[i].push_str(&decoded);
        }
        pos += lt;
        let rest = &doc[pos..];
        if let Some(r) = rest.strip_prefix("<!--") {
            let end = r.find("-->").ok_or("an unterminated comment")?;
            pos += 4 + end + 3;
            continue;
        }
        if let Some(r) = rest.strip_prefix("<?") {
            if root.is_some() || !stack.is_empty() {
                return Err(format!("a declaration inside the document at byte {pos}"));
            }
            let end = r.find("?>").ok_or("an unterminated declaration")?;
            pos += 2 + end + 2;
            continue;
        }
        let gt = rest
            .find('>')
            .ok_or_else(|| format!("an unterminated tag at byte {pos}"))?;
        let tag = &rest[1..gt];
        pos += gt + 1;
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim_end();
            match stack.pop() {
                Some(open) if open == name => {
                    open_text.pop();
                }
                Some(open) => return Err(format!("</{name}> closes <{open}>")),
                None => return Err(format!("</{name}> closes nothing")),
            }
            continue;
        }
        let (body, self_closing) = match tag.strip_suffix('/') {
            Some(b) => (b, true),
            None => (tag, false),
        };
        let name_len = body.find(|c: char| !is_name_char(c)).unwrap_or(body.len());
        let name = &body[..name_len];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
            return Err(format!("a bad element name in <{tag}>"));
        }
        let mut attrs = &body[name_len..];
        let mut seen: Vec<&str> = Vec::new();
        loop {
            let trimmed = attrs.trim_start();
            if trimmed.is_empty() {
                break;
            }
            if trimmed.len() == attrs.len() {
                return Err(format!(
                    "attributes of <{name}> are not separated by spaces"
                ));
            }
            let eq = trimmed
                .find('=')
                .ok_or_else(|| format!("an attribute without a value in <{name}>"))?;
            let key = trimmed[..eq].trim_end();
            if key.is_empty() || !key.chars().all(is_name_char) {
                return Err(format!("a bad attribute name {key:?} in <{name}>"));
            }
            if seen.contains(&key) {
                return Err(format!("attribute {key} twice in <{name}>"));
            }
            seen.push(key);
            let after = trimmed[eq + 1..].trim_start();
            let quote = after
                .chars()
                .next()
                .filter(|c| *c == '"' || *c == '\'')
                .ok_or_else(|| format!("attribute {key} of <{name}> is not quoted"))?;
            let close = after[1..]
                .find(quote)
                .ok_or_else(|| format!("attribute {key} of <{name}> is not closed"))?;
            decode(&after[1..1 + close], pos)?;
            attrs = &after[1 + close + 1..];
        }
        if stack.is_empty() {
            if root.is_some() {
                return Err(format!("a second root element <{name}>"));
            }
            root = Some(name.to_string());
        }
        elements.push(name.to_string());
        texts.push(String::new());
        if !self_closing {
            stack.push(name.to_string());
            open_text.push(texts.len() - 1);
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!("unclosed <{open}>"));
    }
    let root = root.ok_or("no root element")?;
    Ok(XmlSummary {
        root,
        elements,
        texts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_well_formed_and_rejects_the_rest() {
        let ok = check_well_formed(
            "<?xml version=\"1.0\"?>\n<!-- c --><svg a=\"1\" b='x &amp; y'><text>1 &lt; 2</text><g/></svg>\n",
        );
        let ok = ok.map_err(|e| e.to_string());
        assert_eq!(
            ok.as_ref()
                .map(|s| (s.root.as_str(), s.elements.len(), s.texts[1].as_str())),
            Ok(("svg", 3, "1 < 2"))
        );
        for bad in [
            "<svg><text></svg>",
            "<svg></svg><svg></svg>",
            "<svg a=1></svg>",
            "<svg a=\"1\" a=\"2\"></svg>",
            "<svg>a & b</svg>",
            "<svg>a < b</svg>",
            "<svg a=\"<\"></svg>",
            "<svg>",
            "text<svg/>",
            "<svg/>trailing",
            "<svg>&bogus;</svg>",
            "",
        ] {
            assert!(check_well_formed(bad).is_err(), "accepted {bad:?}");
        }
    }
}
