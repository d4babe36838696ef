//! `strftime_now` for templates: the C `strftime` conversions templates use, in UTC, from
//! seconds since 1970 (the caller's clock: `std::time` has none on wasm32).

use minijinja::{Error, ErrorKind};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// (year, month 1..=12, day 1..=31) of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// `format` with `%a %A %b %B %d %e %H %I %j %m %M %p %S %y %Y %%` replaced for the instant
/// `unix` (seconds since 1970, UTC); another conversion is an error naming it.
pub fn strftime(unix: i64, format: &str) -> Result<String, Error> {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs / 3600, secs / 60 % 60, secs % 60);
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let month_name = MONTHS[(month - 1) as usize];
    let before: u32 = (1..month)
        .map(|m| match m {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        })
        .sum();
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let conv = chars.next().unwrap_or('%');
        let piece = match conv {
            'a' => DAYS[weekday][..3].into(),
            'A' => DAYS[weekday].into(),
            'b' | 'h' => month_name[..3].into(),
            'B' => month_name.into(),
            'd' => format!("{day:02}"),
            'e' => format!("{day:2}"),
            'H' => format!("{hour:02}"),
            'I' => format!("{:02}", (hour + 11) % 12 + 1),
            'j' => format!("{:03}", before + day),
            'm' => format!("{month:02}"),
            'M' => format!("{minute:02}"),
            'p' => String::from(if hour < 12 { "AM" } else { "PM" }),
            'S' => format!("{second:02}"),
            'y' => format!("{:02}", year.rem_euclid(100)),
            'Y' => format!("{year}"),
            '%' => "%".into(),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("strftime_now: the conversion %{other} is not supported"),
                ));
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_match_the_c_library() {
        // date -u -d @1795392000 '+%d %b %Y %A %j %H:%M:%S %I%p %y %B %e' (2026-11-23 00:00).
        let t = 1_795_392_000;
        assert_eq!(
            strftime(t, "%d %b %Y %A %j %H:%M:%S %I%p %y %B %e %%").unwrap(),
            "23 Nov 2026 Monday 327 00:00:00 12AM 26 November 23 %"
        );
        assert_eq!(strftime(0, "%Y-%m-%d %a").unwrap(), "1970-01-01 Thu");
        // A leap day, an afternoon, and an instant before 1970.
        assert_eq!(
            strftime(951_834_600, "%Y-%m-%d %H:%M %I%p %j").unwrap(),
            "2000-02-29 14:30 02PM 060"
        );
        assert_eq!(
            strftime(-1, "%Y-%m-%d %H:%M:%S").unwrap(),
            "1969-12-31 23:59:59"
        );
        assert!(strftime(0, "%Q").is_err());
    }
}
