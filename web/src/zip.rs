//! A stored (uncompressed) zip writer: enough for the Train section's "download weights", a
//! Hugging Face directory (`config.json`, `model.safetensors`, `tokenizer.json`) in one file.
//! f32 weights hardly compress, so storing costs little. No zip64: an entry or the archive
//! past 4 GiB, or more than 65,535 entries, is refused.

use std::fmt;

/// Why an archive cannot be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZipError {
    /// Over a limit of the (non-zip64) format.
    TooLarge {
        what: String,
        value: u64,
        limit: u64,
    },
    /// A name the format or unzip tools would misread.
    BadName { name: String, why: &'static str },
}

impl fmt::Display for ZipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZipError::TooLarge { what, value, limit } => {
                write!(f, "zip: {what} is {value}, over the format's {limit}")
            }
            ZipError::BadName { name, why } => write!(f, "zip: entry name `{name}`: {why}"),
        }
    }
}

impl std::error::Error for ZipError {}

/// MS-DOS date of 1980-01-01 (the format's epoch; the archive carries no real times, so the
/// same files give the same bytes).
const DOS_DATE: u16 = (1 << 5) | 1;
/// Version 2.0: stored entries and folders.
const VERSION: u16 = 20;
/// General-purpose flag bit 11: names are UTF-8.
const UTF8: u16 = 1 << 11;

fn u32_of(what: &str, v: usize) -> Result<u32, ZipError> {
    u32::try_from(v).map_err(|_| ZipError::TooLarge {
        what: what.into(),
        value: v as u64,
        limit: u64::from(u32::MAX),
    })
}

/// The archive of `entries` (`(path inside the archive, bytes)`, in order), every one stored.
pub fn stored(entries: &[(&str, &[u8])]) -> Result<Vec<u8>, ZipError> {
    let count = u16::try_from(entries.len()).map_err(|_| ZipError::TooLarge {
        what: "the number of entries".into(),
        value: entries.len() as u64,
        limit: u64::from(u16::MAX),
    })?;
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        if name.is_empty() || name.starts_with('/') || name.contains('\\') {
            return Err(ZipError::BadName {
                name: (*name).into(),
                why: "must be a relative path with `/` separators",
            });
        }
        let name_len = u16::try_from(name.len()).map_err(|_| ZipError::TooLarge {
            what: format!("the length of the name `{name}`"),
            value: name.len() as u64,
            limit: u64::from(u16::MAX),
        })?;
        let crc = crc32fast::hash(data);
        let size = u32_of(&format!("the size of `{name}`"), data.len())?;
        let offset = u32_of("the archive's size", out.len())?;
        // The fields local and central headers share, from "version needed" to the name length.
        let mut common = Vec::with_capacity(26);
        for v in [VERSION, UTF8, 0, 0, DOS_DATE] {
            common.extend_from_slice(&v.to_le_bytes());
        }
        for v in [crc, size, size] {
            common.extend_from_slice(&v.to_le_bytes());
        }
        common.extend_from_slice(&name_len.to_le_bytes());

        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&common);
        out.extend_from_slice(&0u16.to_le_bytes()); // extra field length
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);

        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&VERSION.to_le_bytes()); // made by
        central.extend_from_slice(&common);
        // Extra and comment lengths, disk number, internal and external attributes.
        central.extend_from_slice(&[0; 2 + 2 + 2 + 2 + 4]);
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let central_offset = u32_of("the archive's size", out.len())?;
    let central_size = u32_of("the central directory's size", central.len())?;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // this disk, the central directory's disk
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&central_size.to_le_bytes());
    out.extend_from_slice(&central_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // comment length
    u32_of("the archive's size", out.len())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(b: &[u8], i: usize) -> usize {
        usize::from(u16::from_le_bytes([b[i], b[i + 1]]))
    }
    fn u32_at(b: &[u8], i: usize) -> u32 {
        u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }

    /// Lists an archive the way an unzip tool does: from the end record through the central
    /// directory to each local header, checking what the two say and each entry's CRC.
    fn read(zip: &[u8]) -> Vec<(String, Vec<u8>)> {
        let end = zip.len() - 22;
        assert_eq!(u32_at(zip, end), 0x0605_4b50);
        let n = u16_at(zip, end + 10);
        let mut at = u32_at(zip, end + 16) as usize;
        assert_eq!(at + u32_at(zip, end + 12) as usize, end);
        let mut out = Vec::new();
        for _ in 0..n {
            assert_eq!(u32_at(zip, at), 0x0201_4b50);
            let (crc, size) = (u32_at(zip, at + 16), u32_at(zip, at + 20) as usize);
            let name_len = u16_at(zip, at + 28);
            let local = u32_at(zip, at + 42) as usize;
            let name = String::from_utf8(zip[at + 46..at + 46 + name_len].to_vec()).unwrap();
            assert_eq!(u32_at(zip, local), 0x0403_4b50);
            assert_eq!(u16_at(zip, local + 8), 0, "stored");
            assert_eq!(u32_at(zip, local + 14), crc);
            let data_at = local + 30 + u16_at(zip, local + 26) + u16_at(zip, local + 28);
            assert_eq!(&zip[local + 30..local + 30 + name_len], name.as_bytes());
            let data = zip[data_at..data_at + size].to_vec();
            assert_eq!(crc32fast::hash(&data), crc);
            out.push((name, data));
            at += 46 + name_len;
        }
        out
    }

    #[test]
    fn archives_list_and_round_trip_their_entries() {
        let weights: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let entries: [(&str, &[u8]); 3] = [
            ("model/config.json", b"{\"model_type\": \"llama\"}"),
            ("model/model.safetensors", &weights),
            ("model/empty.txt", b""),
        ];
        let zip = stored(&entries).unwrap();
        let back = read(&zip);
        assert_eq!(back.len(), 3);
        for ((name, data), (n, d)) in entries.iter().zip(&back) {
            assert_eq!(name, n);
            assert_eq!(data, d);
        }
        // The same entries give the same bytes (no times in the archive).
        assert_eq!(stored(&entries).unwrap(), zip);
        assert_eq!(read(&stored(&[]).unwrap()).len(), 0);
    }

    #[test]
    fn the_checksum_is_zips_crc32() {
        // The CRC-32 check value of the format (ISO-HDLC).
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "/etc/passwd", "a\\b"] {
            assert!(matches!(
                stored(&[(bad, b"x")]),
                Err(ZipError::BadName { .. })
            ));
        }
        let long = "x".repeat(70_000);
        let e = stored(&[(&long, b"x")]).unwrap_err();
        assert!(e.to_string().contains("name"), "{e}");
    }
}
