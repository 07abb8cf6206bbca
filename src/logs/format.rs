//! The CRI log format containerd writes for each container, one record per line:
//!
//! ```text
//! 2016-10-06T00:17:09.669794202Z stdout P log content 1
//! 2016-10-06T00:17:09.669794203Z stderr F log content 2
//! ```
//!
//! An RFC 3339 timestamp (any fraction, `Z` or a numeric offset), the stream, a tag (`P` for a
//! partial line the runtime split, `F` for the end of a line; further tags after a `:` are
//! ignored, as upstream does for forward compatibility) and the content. Pure code: no IO.

/// The stream a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line of the file, decoded. `content` has no trailing newline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Unix nanoseconds.
    pub time: i64,
    pub stream: Stream,
    pub partial: bool,
    pub content: &'a [u8],
}

/// Why a line is not a CRI log record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("timestamp is not found")]
    NoTimestamp,
    #[error("unexpected timestamp format (want RFC 3339)")]
    BadTimestamp,
    #[error("stream type is not found")]
    NoStream,
    #[error("unexpected stream type (want stdout or stderr)")]
    BadStream,
    #[error("log tag is not found")]
    NoTag,
}

/// Decodes one line (without its `\n`; a trailing `\r` is content).
pub fn parse_record(line: &[u8]) -> Result<Record<'_>, ParseError> {
    let (ts, rest) = split_space(line).ok_or(ParseError::NoTimestamp)?;
    let time = parse_time(ts).ok_or(ParseError::BadTimestamp)?;
    let (stream, rest) = split_space(rest).ok_or(ParseError::NoStream)?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return Err(ParseError::BadStream),
    };
    let (tags, content) = split_space(rest).ok_or(ParseError::NoTag)?;
    let first = tags.split(|&b| b == b':').next().unwrap_or_default();
    Ok(Record {
        time,
        stream,
        partial: first == b"P",
        content,
    })
}

fn split_space(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|&c| c == b' ')?;
    Some((&b[..i], &b[i + 1..]))
}

fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    b.iter().try_fold(0i64, |n, &d| {
        n.checked_mul(10)?.checked_add(i64::from(d - b'0'))
    })
}

/// Days from 1970-01-01 to a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses RFC 3339 (`2024-05-01T12:00:00Z`, `...00.123456789Z`, `...00+02:00`) to unix
/// nanoseconds; `None` for anything else or a time outside the `i64` range (years 1677-2262).
pub fn parse_time(s: &[u8]) -> Option<i64> {
    if s.len() < 20 || s.len() > 40 {
        return None;
    }
    let sep = |i: usize, c: u8| s.get(i) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && (sep(10, b'T') || sep(10, b't')) && sep(13, b':'))
        || !sep(16, b':')
    {
        return None;
    }
    let (y, mo, d) = (digits(&s[0..4])?, digits(&s[5..7])?, digits(&s[8..10])?);
    let (h, mi, sec) = (
        digits(&s[11..13])?,
        digits(&s[14..16])?,
        digits(&s[17..19])?,
    );
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 {
        return None;
    }
    // A leap second (60) is accepted as Go does, and folds into the next second.
    if sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0i64;
    if let Some(r) = rest.strip_prefix(b".") {
        let n = r.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return None;
        }
        frac = digits(&r[..n])? * 10i64.pow(u32::try_from(9 - n).ok()?);
        rest = &r[n..];
    }
    let offset = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let oh = digits(&[*h1, *h2])?;
            let om = digits(&[*m1, *m2])?;
            if oh > 23 || om > 59 {
                return None;
            }
            let o = (oh * 60 + om) * 60;
            if *sign == b'-' { -o } else { o }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    secs.checked_mul(1_000_000_000)?.checked_add(frac)
}

/// Formats unix nanoseconds as upstream's RFC3339NanoFixed in UTC, nine fractional digits
/// always: `2024-05-01T12:00:00.000000000Z`.
pub fn format_time(nanos: i64) -> String {
    let base = crate::api::time::rfc3339(nanos);
    format!(
        "{}.{:09}Z",
        &base[..base.len() - 1],
        nanos.rem_euclid(1_000_000_000)
    )
}

/// A whole line of output: partial records joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The time of its first record.
    pub time: i64,
    pub stream: Stream,
    /// Without the newline.
    pub content: Vec<u8>,
}

/// Joins partial (`P`) records to the final (`F`) one of the same stream. Each stream has its
/// own pending line, as the runtime splits stdout and stderr separately. A pending line that
/// grows past `max` bytes is handed out as it is and the rest starts a new line, so a
/// container that never ends a line cannot make the reader hold its whole log.
#[derive(Debug)]
pub struct Joiner {
    pending: [Option<Line>; 2],
    max: usize,
}

/// The longest joined line kept whole.
pub const MAX_LINE: usize = 1024 * 1024;

impl Default for Joiner {
    fn default() -> Self {
        Joiner::new(MAX_LINE)
    }
}

impl Joiner {
    pub fn new(max: usize) -> Joiner {
        Joiner {
            pending: [None, None],
            max: max.max(1),
        }
    }

    /// Adds a record; returns the line it completes, if any.
    pub fn push(&mut self, r: &Record<'_>) -> Option<Line> {
        let slot = &mut self.pending[r.stream as usize];
        let line = slot.get_or_insert_with(|| Line {
            time: r.time,
            stream: r.stream,
            content: Vec::new(),
        });
        line.content.extend_from_slice(r.content);
        if !r.partial || line.content.len() >= self.max {
            return slot.take();
        }
        None
    }

    /// True when a partial line waits for its end.
    pub fn is_pending(&self) -> bool {
        self.pending.iter().any(Option::is_some)
    }

    /// The partial lines still waiting (at the end of a log), oldest first.
    pub fn finish(&mut self) -> Vec<Line> {
        let mut v: Vec<Line> = self.pending.iter_mut().filter_map(Option::take).collect();
        v.sort_by_key(|l| l.time);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_decode() {
        let r = parse_record(b"2016-10-06T00:17:09.669794202Z stdout P log content 1").unwrap();
        assert_eq!(r.stream, Stream::Stdout);
        assert!(r.partial);
        assert_eq!(r.content, b"log content 1");
        assert_eq!(r.time, 1_475_713_029_669_794_202);
        let r = parse_record(b"2016-10-06T00:17:09Z stderr F ").unwrap();
        assert_eq!(
            (r.stream, r.partial, r.content),
            (Stream::Stderr, false, &b""[..])
        );
        // Extra tags after ':' are ignored; the content keeps its spaces.
        let r = parse_record(b"2016-10-06T00:17:09Z stdout P:x  a b ").unwrap();
        assert!(r.partial);
        assert_eq!(r.content, b" a b ");
    }

    #[test]
    fn bad_records_say_what_is_wrong() {
        assert_eq!(parse_record(b"nospace"), Err(ParseError::NoTimestamp));
        assert_eq!(
            parse_record(b"yesterday stdout F x"),
            Err(ParseError::BadTimestamp)
        );
        assert_eq!(
            parse_record(b"2016-10-06T00:17:09Z stdout"),
            Err(ParseError::NoStream)
        );
        assert_eq!(
            parse_record(b"2016-10-06T00:17:09Z stdin F x"),
            Err(ParseError::BadStream)
        );
        assert_eq!(
            parse_record(b"2016-10-06T00:17:09Z stdout F"),
            Err(ParseError::NoTag)
        );
        assert!(parse_record(b"").is_err());
    }

    #[test]
    fn timestamps() {
        let t = |s: &str| parse_time(s.as_bytes());
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(t("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(t("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(t("1969-12-31T23:00:00-01:00"), Some(0));
        assert_eq!(t("2024-02-29T00:00:00Z"), Some(1_709_164_800_000_000_000));
        for bad in [
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00.1234567891Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00+0100",
            "+024-01-01T00:00:00Z",
            "9999-01-01T00:00:00Z",
        ] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }

    #[test]
    fn formatting_is_fixed_width_and_round_trips() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            format_time(1_475_713_029_669_794_202),
            "2016-10-06T00:17:09.669794202Z"
        );
        for n in [0, 1, 999_999_999, 1_709_164_800_123_000_000, -1] {
            assert_eq!(parse_time(format_time(n).as_bytes()), Some(n), "{n}");
        }
    }

    #[test]
    fn partial_records_join_per_stream() {
        let mut j = Joiner::default();
        let rec = |t, stream, partial, c: &'static str| Record {
            time: t,
            stream,
            partial,
            content: c.as_bytes(),
        };
        assert_eq!(j.push(&rec(1, Stream::Stdout, true, "hel")), None);
        // Another stream's line in between does not break the stdout one.
        let e = j.push(&rec(2, Stream::Stderr, false, "oops")).unwrap();
        assert_eq!((e.time, e.content), (2, b"oops".to_vec()));
        assert!(j.is_pending());
        let l = j.push(&rec(3, Stream::Stdout, false, "lo")).unwrap();
        assert_eq!(l.content, b"hello");
        assert_eq!(l.time, 1, "a joined line has its first record's time");
        assert!(!j.is_pending());
        j.push(&rec(5, Stream::Stderr, true, "b"));
        j.push(&rec(4, Stream::Stdout, true, "a"));
        let left = j.finish();
        assert_eq!(left.len(), 2);
        assert_eq!(left[0].content, b"a");
        assert!(!j.is_pending());
    }

    #[test]
    fn a_line_that_never_ends_is_cut() {
        let mut j = Joiner::new(4);
        let r = Record {
            time: 0,
            stream: Stream::Stdout,
            partial: true,
            content: b"abc",
        };
        assert_eq!(j.push(&r), None);
        assert_eq!(j.push(&r).unwrap().content, b"abcabc");
        assert!(!j.is_pending());
    }
}
