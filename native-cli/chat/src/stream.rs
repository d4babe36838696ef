//! Streamed text that is the tokenizer's own decode: [`TextStream`].
//!
//! Decoding each new token alone is wrong in two ways: a character whose UTF-8 bytes are split
//! across tokens comes out as U+FFFD, and decoders that join tokens (a WordLevel tokenizer's
//! spaces, SentencePiece's leading space, byte-level BPE's bytes) see one token at a time. A
//! [`TextStream`] instead decodes the whole sequence so far and shows what is new once it is
//! settled, so that what it has shown, once [`TextStream::finish`] is called, is exactly
//! `decode(all ids)`.

/// U+FFFD, what a lossy UTF-8 decode gives for bytes that do not (yet) form a character.
const REPLACEMENT: char = '\u{FFFD}';

/// Turns generated token ids into text pieces whose concatenation is the tokenizer's decode
/// of all of them.
///
/// Text is shown once it is settled: once the decode of the sequence with the next token
/// still begins with it, and never with a trailing U+FFFD (the first bytes of a character whose
/// last bytes are still to come). That holds a token's text back until the next token arrives
/// (or [`TextStream::finish`]), which is what lets a decoder that rewrites the end of the
/// text when a token follows (cleanup of spaces before punctuation, a leading space stripped)
/// still end exactly at the full decode.
///
/// `decode` is the tokenizer's decode of a whole sequence, passed to each call so the type
/// needs no tokenizer library (the CLI and the web page each bring theirs).
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    /// The decode of `ids` at the previous push.
    last: String,
    /// What has been shown: always a prefix of the decodes since.
    shown: String,
    /// A decode did not begin with what had been shown (see [`TextStream::rewritten`]).
    rewritten: bool,
}

impl TextStream {
    pub fn new() -> TextStream {
        TextStream::default()
    }

    /// A stream whose text begins with `prefix` (a prompt's ids), and the part of the prefix's
    /// text already settled: what the stream shows in all is then the decode of the prefix and
    /// every id pushed after it, the edge between them included (two decodes, however long the
    /// prefix).
    pub fn with_prefix<E>(
        prefix: &[u32],
        decode: &mut dyn FnMut(&[u32]) -> Result<String, E>,
    ) -> Result<(TextStream, String), E> {
        let mut s = TextStream::new();
        let Some((_, head)) = prefix.split_last() else {
            return Ok((s, String::new()));
        };
        let before = if head.is_empty() {
            String::new()
        } else {
            decode(head)?
        };
        s.ids = prefix.to_vec();
        let text = decode(&s.ids)?;
        let settled = common_prefix(&before, &text).trim_end_matches(REPLACEMENT);
        let piece = s.advance(settled);
        s.last = text;
        Ok((s, piece))
    }

    /// Adds a token and returns the text now settled (often empty).
    pub fn push<E>(
        &mut self,
        id: u32,
        decode: &mut dyn FnMut(&[u32]) -> Result<String, E>,
    ) -> Result<String, E> {
        self.ids.push(id);
        let text = decode(&self.ids)?;
        // Settled: what this decode and the previous one agree on, without a trailing
        // incomplete character.
        let agreed = common_prefix(&self.last, &text);
        let settled = agreed.trim_end_matches(REPLACEMENT);
        let piece = self.advance(settled);
        self.last = text;
        Ok(piece)
    }

    /// Ends the stream: returns the rest of the full decode (whatever it holds, U+FFFD
    /// included, as the tokenizer decodes it).
    pub fn finish<E>(
        &mut self,
        decode: &mut dyn FnMut(&[u32]) -> Result<String, E>,
    ) -> Result<String, E> {
        let text = if self.ids.is_empty() {
            String::new()
        } else {
            decode(&self.ids)?
        };
        let piece = self.advance(&text);
        self.last = text;
        Ok(piece)
    }

    /// The text shown so far (the concatenation of the pieces returned).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The ids pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// True when a decode rewrote text already shown by more than the one token held back
    /// (no tokenizer this project knows does that): the pieces then no longer add up to the
    /// full decode, and the caller should say so and show the full decode.
    pub fn rewritten(&self) -> bool {
        self.rewritten
    }

    /// Shows `target`'s part beyond what is shown, when `target` extends it.
    fn advance(&mut self, target: &str) -> String {
        match target.strip_prefix(self.shown.as_str()) {
            Some(rest) if !rest.is_empty() => {
                let piece = String::from(rest);
                self.shown.push_str(rest);
                piece
            }
            Some(_) => String::new(),
            None => {
                // `target` shorter than what is shown but agreeing with it is no rewrite.
                if !self.shown.starts_with(target) {
                    self.rewritten = true;
                }
                String::new()
            }
        }
    }
}

/// The longest common prefix of `a` and `b`, on a character boundary.
fn common_prefix<'a>(a: &str, b: &'a str) -> &'a str {
    let mut end = 0;
    for ((i, ca), cb) in b.char_indices().zip(a.chars()) {
        if ca != cb {
            break;
        }
        end = i + ca.len_utf8();
    }
    &b[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoder over a table of byte strings, lossy like byte-level BPE.
    fn bytes_decoder(table: &[&[u8]]) -> impl FnMut(&[u32]) -> Result<String, String> {
        let table: Vec<Vec<u8>> = table.iter().map(|b| b.to_vec()).collect();
        move |ids: &[u32]| {
            let mut all = Vec::new();
            for &id in ids {
                all.extend_from_slice(table.get(id as usize).ok_or("no such id")?);
            }
            Ok(String::from_utf8_lossy(&all).into_owned())
        }
    }

    fn stream_all(
        ids: &[u32],
        decode: &mut dyn FnMut(&[u32]) -> Result<String, String>,
    ) -> (Vec<String>, TextStream) {
        let mut s = TextStream::new();
        let mut pieces: Vec<String> = ids.iter().map(|&id| s.push(id, decode).unwrap()).collect();
        pieces.push(s.finish(decode).unwrap());
        (pieces, s)
    }

    #[test]
    fn split_characters_wait_for_their_last_byte() {
        // "é" is C3 A9 and "😀" is F0 9F 98 80: each split over tokens.
        let mut d = bytes_decoder(&[b"caf", b"\xC3", b"\xA9", b" \xF0\x9F", b"\x98", b"\x80!"]);
        let (pieces, s) = stream_all(&[0, 1, 2, 3, 4, 5], &mut d);
        assert!(
            pieces.iter().all(|p| !p.contains(REPLACEMENT)),
            "{pieces:?}"
        );
        assert_eq!(pieces.concat(), "café 😀!");
        assert_eq!(s.shown(), "café 😀!");
        assert!(!s.rewritten());
    }

    #[test]
    fn a_truly_invalid_byte_is_shown_as_the_decoder_shows_it() {
        let mut d = bytes_decoder(&[b"a", b"\xFF", b"b", b"\xC3"]);
        let (pieces, _) = stream_all(&[0, 1, 2, 3], &mut d);
        assert_eq!(pieces.concat(), "a\u{FFFD}b\u{FFFD}");
    }

    #[test]
    fn a_decoder_that_rewrites_the_last_token_still_ends_at_the_full_decode() {
        // Like a cleanup of spaces before an apostrophe: "a '" becomes "a's" when "s" follows.
        let mut d = |ids: &[u32]| -> Result<String, String> {
            let words: Vec<&str> = ids
                .iter()
                .map(|&i| ["a", "'", "s", "b"][i as usize])
                .collect();
            Ok(words.join(" ").replace(" ' s", "'s"))
        };
        let (pieces, s) = stream_all(&[0, 1, 2, 3], &mut d);
        assert_eq!(pieces.concat(), "a's b");
        assert!(!s.rewritten());
    }

    #[test]
    fn a_rewrite_further_back_is_reported() {
        // The fourth token rewrites the first character, two tokens after it was shown.
        let mut d = |ids: &[u32]| -> Result<String, String> {
            let text: String = ids
                .iter()
                .map(|&i| ['a', 'b', 'c', 'z'][i as usize])
                .collect();
            Ok(if ids.len() == 4 {
                text.replace('a', "X")
            } else {
                text
            })
        };
        let (pieces, s) = stream_all(&[0, 1, 2], &mut d);
        assert_eq!((pieces.concat().as_str(), s.rewritten()), ("abc", false));
        let (pieces, s) = stream_all(&[0, 1, 2, 3], &mut d);
        assert_eq!(pieces.concat(), "ab");
        assert!(s.rewritten());
    }

    #[test]
    fn a_prefix_and_its_continuation_add_up_to_the_decode_of_both() {
        // Words joined by spaces: the edge between prompt and continuation gets its space.
        let mut d = |ids: &[u32]| -> Result<String, String> {
            Ok(ids
                .iter()
                .map(|i| format!("t{i}"))
                .collect::<Vec<_>>()
                .join(" "))
        };
        let (mut s, head) = TextStream::with_prefix(&[5, 17, 42], &mut d).unwrap();
        assert_eq!(head, "t5 t17");
        let mut text = head;
        text.push_str(&s.push(270, &mut d).unwrap());
        text.push_str(&s.finish(&mut d).unwrap());
        assert_eq!(text, "t5 t17 t42 t270");
        let (mut s, head) = TextStream::with_prefix(&[], &mut d).unwrap();
        assert_eq!(head, "");
        assert_eq!(s.finish(&mut d).unwrap(), "");
    }

    #[test]
    fn pieces_come_one_token_late_and_errors_pass_through() {
        let mut d = bytes_decoder(&[b"x", b"y"]);
        let mut s = TextStream::new();
        assert_eq!(s.push(0, &mut d).unwrap(), "");
        assert_eq!(s.push(1, &mut d).unwrap(), "x");
        assert_eq!(s.finish(&mut d).unwrap(), "y");
        assert_eq!(s.ids(), &[0, 1]);
        assert!(s.push(7, &mut d).is_err());
        assert_eq!(TextStream::new().finish(&mut d).unwrap(), "");
    }
}
