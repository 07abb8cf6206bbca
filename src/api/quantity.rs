//! Kubernetes resource quantities ("500m", "128Mi", "1e3").
//!
//! Grammar (apimachinery `resource.Quantity`):
//!
//! ```text
//! quantity        ::= signedNumber suffix
//! signedNumber    ::= [ "+" | "-" ] number
//! number          ::= digits | digits "." digits | digits "." | "." digits
//! suffix          ::= binarySI | decimalSI | decimalExponent
//! binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
//! decimalExponent ::= ( "e" | "E" ) [ "+" | "-" ] digits
//! ```
//!
//! The value is kept exactly as a signed count of nano-units (10^-9) in an
//! `i128`. Like apimachinery, a non-zero value finer than one nano-unit is
//! rounded away from zero ("0.1n" is 1n) and binarySI values are capped at
//! 2^63-1. Values beyond the `i128` range are refused.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// A parsed quantity: the text exactly as written plus its exact value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    text: String,
    nanos: i128,
}

/// Why a string is not a valid quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity must not be empty")]
    Empty,
    #[error(
        "quantity {0:?} must start with a number (digits with an optional sign and decimal point)"
    )]
    BadNumber(String),
    #[error(
        "quantity {input:?} has an unknown suffix {suffix:?} (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"
    )]
    BadSuffix { input: String, suffix: String },
    #[error("quantity {0:?} is out of range")]
    OutOfRange(String),
}

impl Quantity {
    /// Parses `s` with the exact Kubernetes grammar (no surrounding whitespace).
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let nanos = parse_nanos(s)?;
        Ok(Quantity {
            text: s.to_owned(),
            nanos,
        })
    }

    /// The text as it was written in the manifest.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Exact value in nano-units (10^-9).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// Value in whole units, rounded away from zero ("100m" is 1, "1.5" is 2);
    /// saturates at the `i64` bounds.
    pub fn value(&self) -> i64 {
        scaled(self.nanos, NANOS_PER_UNIT)
    }

    /// Value in thousandths, rounded away from zero ("0.1m" is 1, "1.5" is 1500);
    /// saturates at the `i64` bounds.
    pub fn milli_value(&self) -> i64 {
        scaled(self.nanos, 1_000_000)
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }
}

fn scaled(nanos: i128, unit: i128) -> i64 {
    let q = nanos / unit;
    let q = match (nanos % unit).signum() {
        1 => q + 1,
        -1 => q - 1,
        _ => q,
    };
    i64::try_from(q).unwrap_or(if q < 0 { i64::MIN } else { i64::MAX })
}

/// Returns (power of two, power of ten) for a suffix, or None if unknown.
fn suffix_scale(suffix: &str) -> Option<(u32, i64)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        _ => {
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let (neg, digits) = match rest.as_bytes().first() {
                Some(b'-') => (true, &rest[1..]),
                Some(b'+') => (false, &rest[1..]),
                _ => (false, rest),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Saturate: anything this large overflows or rounds anyway.
            let exp = digits.bytes().fold(0i64, |acc, b| {
                (acc * 10 + i64::from(b - b'0')).min(1_000_000)
            });
            (0, if neg { -exp } else { exp })
        }
    })
}

fn parse_nanos(s: &str) -> Result<i128, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b[0], b'+' | b'-'));
    let negative = b[0] == b'-';
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = &s[int_start..i];
    let mut frac_digits = "";
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = &s[frac_start..i];
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(QuantityError::BadNumber(s.to_owned()));
    }
    let suffix = &s[i..];
    let (pow2, pow10) = suffix_scale(suffix).ok_or_else(|| QuantityError::BadSuffix {
        input: s.to_owned(),
        suffix: suffix.to_owned(),
    })?;
    let overflow = || QuantityError::OutOfRange(s.to_owned());

    // Trailing fractional zeros carry no value; dropping them keeps the
    // mantissa small for inputs like "1.000000000000000000000000000000000000000".
    let frac_digits = frac_digits.trim_end_matches('0');
    let mut mantissa: u128 = 0;
    for d in int_digits.bytes().chain(frac_digits.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(d - b'0')))
            .ok_or_else(overflow)?;
    }
    if mantissa == 0 {
        return Ok(0);
    }
    let mut v = mantissa.checked_mul(1u128 << pow2).ok_or_else(overflow)?;
    // Power of ten that turns `v` into nano-units.
    let frac_len = i64::try_from(frac_digits.len()).map_err(|_| overflow())?;
    let exp = pow10 - frac_len + 9;
    if exp >= 0 {
        let factor = u32::try_from(exp)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
            .ok_or_else(overflow)?;
        v = v.checked_mul(factor).ok_or_else(overflow)?;
    } else {
        // Round away from zero to whole nano-units. u128::MAX < 10^39, so
        // dividing by 10^39 or more always leaves a non-zero remainder below 1.
        v = match u32::try_from(-exp).ok().and_then(|e| 10u128.checked_pow(e)) {
            Some(div) => v / div + u128::from(v % div != 0),
            None => 1,
        };
    }
    if pow2 > 0 {
        // apimachinery silently caps binarySI quantities at 2^63-1.
        let cap = u128::from(i64::MAX.unsigned_abs()) * 1_000_000_000;
        v = v.min(cap);
    }
    let magnitude = i128::try_from(v).map_err(|_| overflow())?;
    Ok(if negative { -magnitude } else { magnitude })
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

struct QuantityVisitor;

impl Visitor<'_> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quantity such as \"500m\", \"128Mi\" or 1")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
        // apimachinery's UnmarshalJSON trims surrounding whitespace too.
        Quantity::parse(v.trim()).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
        // Display for f64 is the shortest exact round-trip form without an
        // exponent ("0.5", "1000000"), which the grammar accepts.
        self.visit_str(&v.to_string())
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(QuantityVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    const GI: i128 = 1 << 30;

    #[test]
    fn decimal_si() {
        assert_eq!(q("100m").nanos(), 100_000_000);
        assert_eq!(q("100m").milli_value(), 100);
        assert_eq!(q("100m").value(), 1);
        assert_eq!(q("500m").milli_value(), 500);
        assert_eq!(q("1G").value(), 1_000_000_000);
        assert_eq!(q("1k").value(), 1000);
        assert_eq!(q("2M").value(), 2_000_000);
        assert_eq!(q("3T").value(), 3_000_000_000_000);
        assert_eq!(q("1P").value(), 1_000_000_000_000_000);
        assert_eq!(q("1E").value(), 1_000_000_000_000_000_000);
        assert_eq!(q("5n").nanos(), 5);
        assert_eq!(q("5n").milli_value(), 1);
        assert_eq!(q("1u").nanos(), 1000);
        assert_eq!(q("1u").value(), 1);
    }

    #[test]
    fn plain_numbers_and_signs() {
        assert_eq!(q("0").nanos(), 0);
        assert!(q("0").is_zero());
        assert!(q("-0").is_zero());
        assert!(q("0.000").is_zero());
        assert!(q("0Gi").is_zero());
        assert_eq!(q("0.5").milli_value(), 500);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("1.5").value(), 2);
        assert_eq!(q("-1").value(), -1);
        assert!(q("-1").is_negative());
        assert_eq!(q("+1").value(), 1);
        assert_eq!(q("007").value(), 7);
        assert_eq!(q(".5").milli_value(), 500);
        assert_eq!(q("5.").value(), 5);
        assert_eq!(q("1.G").value(), 1_000_000_000);
        assert_eq!(q("-.5").milli_value(), -500);
    }

    #[test]
    fn binary_si() {
        assert_eq!(q("1Ki").value(), 1024);
        assert_eq!(q("128Mi").value(), 128 << 20);
        assert_eq!(q("1.5Gi").nanos(), 3 * GI / 2 * NANOS_PER_UNIT);
        assert_eq!(q("1.5Gi").value(), 1_610_612_736);
        assert_eq!(q("2Ti").value(), 2 << 40);
        assert_eq!(q("1Pi").value(), 1 << 50);
        assert_eq!(q("1Ei").value(), 1 << 60);
        assert_eq!(q("0.5Ki").value(), 512);
        // 0.1Ki = 102.4: exact, and value() rounds up
        assert_eq!(q("0.1Ki").milli_value(), 102_400);
        assert_eq!(q("0.1Ki").value(), 103);
        // capped at 2^63-1 like apimachinery
        assert_eq!(q("8Ei").value(), i64::MAX);
        assert_eq!(q("100Ei").value(), i64::MAX);
        assert_eq!(q("-8Ei").value(), -i64::MAX);
    }

    #[test]
    fn decimal_exponent() {
        assert_eq!(q("1e3").value(), 1000);
        assert_eq!(q("1E3").value(), 1000);
        assert_eq!(q("1e+3").value(), 1000);
        assert_eq!(q("1e-3").milli_value(), 1);
        assert_eq!(q("1E-3").nanos(), 1_000_000);
        assert_eq!(q("1.5e2").value(), 150);
        assert_eq!(q("12e6").value(), 12_000_000);
        assert_eq!(q("1e0").value(), 1);
        assert_eq!(q("0e999999999999").nanos(), 0);
        assert_eq!(q("1e-999999").nanos(), 1);
    }

    #[test]
    fn sub_nano_rounds_away_from_zero() {
        assert_eq!(q("0.1n").nanos(), 1);
        assert_eq!(q("0.9n").nanos(), 1);
        assert_eq!(q("1.1n").nanos(), 2);
        assert_eq!(q("-0.1n").nanos(), -1);
        assert_eq!(q("0.0000000001").nanos(), 1);
        assert_eq!(q("0.1m").milli_value(), 1);
        assert_eq!(q("0.1m").value(), 1);
        assert_eq!(q("1001m").value(), 2);
        assert_eq!(q("-1001m").value(), -2);
        assert_eq!(q("-100m").value(), -1);
    }

    #[test]
    fn long_inputs() {
        assert_eq!(
            q("1.000000000000000000000000000000000000000000000").value(),
            1
        );
        assert_eq!(
            q("18446744073709551616").nanos(),
            18_446_744_073_709_551_616 * NANOS_PER_UNIT
        );
        assert_eq!(q("18446744073709551616").value(), i64::MAX);
        assert_eq!(q("-18446744073709551616").value(), i64::MIN);
        assert!(matches!(
            Quantity::parse("1e40"),
            Err(QuantityError::OutOfRange(_))
        ));
        assert!(matches!(
            Quantity::parse("999999999999999999999999999999999999999999"),
            Err(QuantityError::OutOfRange(_))
        ));
        assert!(matches!(
            Quantity::parse("1e999999999999999999999"),
            Err(QuantityError::OutOfRange(_))
        ));
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(Quantity::parse(""), Err(QuantityError::Empty));
        for s in [
            "abc", "--1", "-", "+", ".", "m", "Ki", "e3", " 1", "-+1", "++1", "NaN", "inf",
        ] {
            assert!(
                matches!(Quantity::parse(s), Err(QuantityError::BadNumber(_))),
                "{s:?} should be a bad number"
            );
        }
        for (s, suffix) in [
            ("1.2.3", ".3"),
            ("12Mb", "Mb"),
            ("1KiB", "KiB"),
            ("1 Gi", " Gi"),
            ("1e", "e"),
            ("1E+", "E+"),
            ("1e1.5", "e1.5"),
            ("1K", "K"),
            ("1i", "i"),
            ("1mi", "mi"),
            ("1Gi ", "Gi "),
            ("1kk", "kk"),
            ("1e3m", "e3m"),
            ("1,5", ",5"),
            ("0x10", "x10"),
        ] {
            match Quantity::parse(s) {
                Err(QuantityError::BadSuffix { suffix: got, input }) => {
                    assert_eq!(got, suffix, "{s:?}");
                    assert_eq!(input, s);
                }
                other => panic!("{s:?}: expected bad suffix, got {other:?}"),
            }
        }
    }

    #[test]
    fn error_text() {
        let e = Quantity::parse("12Mb").unwrap_err().to_string();
        assert!(
            e.starts_with("quantity \"12Mb\" has an unknown suffix \"Mb\""),
            "{e}"
        );
        assert_eq!(
            Quantity::parse("").unwrap_err().to_string(),
            "quantity must not be empty"
        );
    }

    #[test]
    fn keeps_text() {
        let x = q("1.50Gi");
        assert_eq!(x.as_str(), "1.50Gi");
        assert_eq!(x.to_string(), "1.50Gi");
        assert_eq!("250m".parse::<Quantity>().unwrap().milli_value(), 250);
    }

    #[test]
    fn serde_round_trip() {
        #[derive(Debug, Deserialize, Serialize)]
        struct R {
            cpu: Quantity,
        }
        let r: R = serde_json::from_str(r#"{"cpu": "500m"}"#).unwrap();
        assert_eq!(r.cpu.milli_value(), 500);
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"cpu":"500m"}"#);

        let r: R = serde_json::from_str(r#"{"cpu": 1}"#).unwrap();
        assert_eq!(r.cpu.as_str(), "1");
        assert_eq!(r.cpu.milli_value(), 1000);
        let r: R = serde_json::from_str(r#"{"cpu": 0.5}"#).unwrap();
        assert_eq!(r.cpu.as_str(), "0.5");
        assert_eq!(r.cpu.milli_value(), 500);
        let r: R = serde_json::from_str(r#"{"cpu": -2}"#).unwrap();
        assert_eq!(r.cpu.value(), -2);
        let r: R = serde_json::from_str(r#"{"cpu": " 2 "}"#).unwrap();
        assert_eq!(r.cpu.as_str(), "2");

        let r: R = yaml_serde::from_str("cpu: 0.25\n").unwrap();
        assert_eq!(r.cpu.milli_value(), 250);
        let r: R = yaml_serde::from_str("cpu: 2\n").unwrap();
        assert_eq!(r.cpu.value(), 2);
        let r: R = yaml_serde::from_str("cpu: 128Mi\n").unwrap();
        assert_eq!(r.cpu.value(), 128 << 20);
        assert_eq!(yaml_serde::to_string(&r).unwrap(), "cpu: 128Mi\n");

        let e = serde_json::from_str::<R>(r#"{"cpu": "1KiB"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown suffix \"KiB\""), "{e}");
        let e = serde_json::from_str::<R>(r#"{"cpu": true}"#).unwrap_err();
        assert!(e.to_string().contains("expected a quantity"), "{e}");
        let e = serde_json::from_str::<R>(r#"{"cpu": ""}"#).unwrap_err();
        assert!(e.to_string().contains("must not be empty"), "{e}");
    }
}
