//! The few X.509 pieces picolet needs, without a certificate library: a self-signed serving
//! certificate (a CA and a leaf it signs, ECDSA P-256 keys made with ring, as the kubelet makes
//! `<root-dir>/pki/kubelet.crt` when given none), kept on disk and reused; the subject (CN and
//! O) of a verified client certificate, which names the user and groups; and for certificates
//! asked of the cluster, a new key, the PKCS#10 request signed with it, PEM blocks, and a
//! certificate's validity period.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

// DER tags.
const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const UTF8_STRING: u8 = 0x0c;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;

// Object identifiers, DER content bytes.
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];
const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
const OID_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
// pkcs-9 extensionRequest: the extensions a certification request asks for.
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];

/// Why a key, a certificate or a certificate request could not be made or read.
#[derive(Debug)]
pub enum PkiError {
    /// The crypto library failed (its errors carry nothing more): what failed.
    Crypto(&'static str),
    /// A PEM block without its END line.
    PemUnclosed { label: String },
    /// A PEM block whose content is not base64.
    PemBase64 {
        label: String,
        source: base64::DecodeError,
    },
    /// A DER structure without a part it must have.
    Der(&'static str),
    /// A file could not be made: what was being done (`creating`, `writing`), and where.
    Io {
        doing: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for PkiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PkiError::Crypto(m) | PkiError::Der(m) => f.write_str(m),
            PkiError::PemUnclosed { label } => write!(f, "PEM block {label:?} has no END line"),
            PkiError::PemBase64 { label, source } => write!(f, "PEM block {label:?}: {source}"),
            PkiError::Io {
                doing,
                path,
                source,
            } => write!(f, "{doing} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for PkiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PkiError::PemBase64 { source, .. } => Some(source),
            PkiError::Io { source, .. } => Some(source),
            PkiError::Crypto(_) | PkiError::Der(_) | PkiError::PemUnclosed { .. } => None,
        }
    }
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(u8::try_from(n).unwrap_or(0));
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | u8::try_from(bytes.len()).unwrap_or(0));
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
    tlv(SEQUENCE, &parts.concat())
}

fn name(cn: &str) -> Vec<u8> {
    let atv = seq(&[tlv(OID, OID_CN), tlv(UTF8_STRING, cn.as_bytes())]);
    seq(&[tlv(SET, &atv)])
}

/// X.509 time: UTCTime through 2049, GeneralizedTime after.
fn time(unix: i64) -> Vec<u8> {
    // "YYYY-MM-DDTHH:MM:SSZ" to "YYYYMMDDHHMMSSZ".
    let t: String = crate::api::rfc3339(unix.saturating_mul(1_000_000_000))
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .filter(|c| *c != 'T')
        .collect();
    let year: i64 = t.get(..4).and_then(|y| y.parse().ok()).unwrap_or(0);
    if (1950..2050).contains(&year) {
        tlv(UTC_TIME, &t.as_bytes()[2..])
    } else {
        tlv(GENERALIZED_TIME, t.as_bytes())
    }
}

fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let mut parts = vec![tlv(OID, oid)];
    if critical {
        parts.push(tlv(BOOLEAN, &[0xff]));
    }
    parts.push(tlv(OCTET_STRING, value));
    seq(&parts)
}

/// What a certificate says of its subject.
struct Profile<'a> {
    subject: &'a str,
    ca: bool,
    dns: &'a [String],
    ips: &'a [IpAddr],
}

fn tbs(
    serial: &[u8],
    issuer: &str,
    p: &Profile,
    public_key: &[u8],
    not_before: i64,
    not_after: i64,
) -> Vec<u8> {
    let alg = seq(&[tlv(OID, OID_ECDSA_SHA256)]);
    let spki = seq(&[
        seq(&[tlv(OID, OID_EC_PUBLIC_KEY), tlv(OID, OID_P256)]),
        tlv(BIT_STRING, &[&[0u8][..], public_key].concat()),
    ]);
    let mut exts = Vec::new();
    let basic = if p.ca {
        seq(&[tlv(BOOLEAN, &[0xff])])
    } else {
        seq(&[])
    };
    exts.push(extension(OID_BASIC_CONSTRAINTS, true, &basic));
    // keyUsage: digitalSignature (bit 0) and keyCertSign (bit 5) for the CA; digitalSignature
    // and keyEncipherment (bit 2) for the server.
    let usage: &[u8] = if p.ca { &[0x02, 0x84] } else { &[0x05, 0xa0] };
    exts.push(extension(OID_KEY_USAGE, true, &tlv(BIT_STRING, usage)));
    if !p.ca {
        exts.push(extension(
            OID_EXT_KEY_USAGE,
            false,
            &seq(&[tlv(OID, OID_SERVER_AUTH)]),
        ));
        exts.push(extension(
            OID_SUBJECT_ALT_NAME,
            false,
            &general_names(p.dns, p.ips),
        ));
    }
    seq(&[
        tlv(0xa0, &tlv(INTEGER, &[2])),
        tlv(INTEGER, serial),
        alg,
        name(issuer),
        seq(&[time(not_before), time(not_after)]),
        name(p.subject),
        spki,
        tlv(0xa3, &seq(&exts)),
    ])
}

fn sign(key: &EcdsaKeyPair, rng: &SystemRandom, tbs: Vec<u8>) -> Result<Vec<u8>, PkiError> {
    let sig = key
        .sign(rng, &tbs)
        .map_err(|_| PkiError::Crypto("signing a certificate failed"))?;
    Ok(seq(&[
        tbs,
        seq(&[tlv(OID, OID_ECDSA_SHA256)]),
        tlv(BIT_STRING, &[&[0u8][..], sig.as_ref()].concat()),
    ]))
}

fn serial(rng: &SystemRandom) -> Result<Vec<u8>, PkiError> {
    let mut s = [0u8; 16];
    ring::rand::SecureRandom::fill(rng, &mut s).map_err(|_| PkiError::Crypto("no randomness"))?;
    // A positive integer with no leading zero byte.
    s[0] = (s[0] & 0x7f) | 0x40;
    Ok(s.to_vec())
}

fn new_key(rng: &SystemRandom) -> Result<(EcdsaKeyPair, Vec<u8>), PkiError> {
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, rng)
        .map_err(|_| PkiError::Crypto("generating an ECDSA P-256 key failed"))?;
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), rng)
        .map_err(|_| PkiError::Crypto("reading the generated key failed"))?;
    Ok((key, pkcs8.as_ref().to_vec()))
}

/// PEM text of one DER object.
pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or(""));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A serving certificate chain (leaf, then the CA that signed it) and the leaf's key, PEM.
#[derive(Debug, Clone)]
pub struct SelfSigned {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Makes a CA `<host>-ca@<now>` and a serving certificate `<host>@<now>` signed by it for the
/// names and addresses given, valid a year from an hour ago.
pub fn self_signed(
    host: &str,
    dns: &[String],
    ips: &[IpAddr],
    now: i64,
) -> Result<SelfSigned, PkiError> {
    let rng = SystemRandom::new();
    let (ca_key, _) = new_key(&rng)?;
    let (leaf_key, leaf_pkcs8) = new_key(&rng)?;
    let (from, to) = (now - 3600, now + 365 * 24 * 3600);
    let ca_name = format!("{host}-ca@{now}");
    let ca_profile = Profile {
        subject: &ca_name,
        ca: true,
        dns: &[],
        ips: &[],
    };
    let ca = sign(
        &ca_key,
        &rng,
        tbs(
            &serial(&rng)?,
            &ca_name,
            &ca_profile,
            ca_key.public_key().as_ref(),
            from,
            to,
        ),
    )?;
    let leaf_name = format!("{host}@{now}");
    let leaf_profile = Profile {
        subject: &leaf_name,
        ca: false,
        dns,
        ips,
    };
    let leaf = sign(
        &ca_key,
        &rng,
        tbs(
            &serial(&rng)?,
            &ca_name,
            &leaf_profile,
            leaf_key.public_key().as_ref(),
            from,
            to,
        ),
    )?;
    Ok(SelfSigned {
        cert_pem: pem("CERTIFICATE", &leaf) + &pem("CERTIFICATE", &ca),
        key_pem: pem("PRIVATE KEY", &leaf_pkcs8),
    })
}

/// The serving certificate the kubelet keeps when given none: `<dir>/kubelet.crt` and
/// `<dir>/kubelet.key`, made once (the key owner-only, both written atomically) and reused.
pub fn ensure_self_signed(
    dir: &Path,
    host: &str,
    dns: &[String],
    ips: &[IpAddr],
    now: i64,
) -> Result<(PathBuf, PathBuf), PkiError> {
    let (crt, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    if crt.exists() && key.exists() {
        return Ok((crt, key));
    }
    let s = self_signed(host, dns, ips, now)?;
    let io = |doing: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| PkiError::Io {
            doing,
            path,
            source,
        }
    };
    crate::atomic_file::create_dir_all(dir).map_err(io("creating", dir))?;
    crate::atomic_file::write_mode(&key, s.key_pem.as_bytes(), 0o600)
        .map_err(io("writing", &key))?;
    crate::atomic_file::write_mode(&crt, s.cert_pem.as_bytes(), 0o644)
        .map_err(io("writing", &crt))?;
    Ok((crt, key))
}

/// A new ECDSA P-256 key, PKCS#8 DER.
pub fn new_key_pkcs8() -> Result<Vec<u8>, PkiError> {
    Ok(new_key(&SystemRandom::new())?.1)
}

/// The keys [`new_key_and_stub_csr`] makes: those of a pod certificate's key types that ring
/// can generate (it makes no RSA keys and no ECDSA P-521 keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
}

/// A new key of `alg` (PKCS#8 DER: for Ed25519 the version 1 form Go's
/// `MarshalPKCS8PrivateKey` writes, the seed alone) and a PKCS#10 request signed with it that
/// carries its public key and nothing else (an empty subject, no attributes): the kubelet's stub
/// request of a PodCertificateRequest, whose signature proves the key is held. ECDSA signs with
/// the curve's hash (SHA-256 for P-256, SHA-384 for P-384), as Go's `CreateCertificateRequest`
/// picks it.
pub fn new_key_and_stub_csr(alg: KeyAlgorithm) -> Result<(Vec<u8>, Vec<u8>), PkiError> {
    let rng = SystemRandom::new();
    type Sign = Box<dyn Fn(&[u8]) -> Result<Vec<u8>, PkiError>>;
    let (pkcs8, spki, sig_alg, sign): (Vec<u8>, Vec<u8>, &[u8], Sign) = match alg {
        KeyAlgorithm::EcdsaP256 | KeyAlgorithm::EcdsaP384 => {
            let (ring_alg, curve, sig_alg) = if alg == KeyAlgorithm::EcdsaP256 {
                (&ECDSA_P256_SHA256_ASN1_SIGNING, OID_P256, OID_ECDSA_SHA256)
            } else {
                (
                    &ring::signature::ECDSA_P384_SHA384_ASN1_SIGNING,
                    OID_P384,
                    OID_ECDSA_SHA384,
                )
            };
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(ring_alg, &rng)
                .map_err(|_| PkiError::Crypto("generating an ECDSA key failed"))?;
            let key = EcdsaKeyPair::from_pkcs8(ring_alg, pkcs8.as_ref(), &rng)
                .map_err(|_| PkiError::Crypto("reading the generated key failed"))?;
            let spki = seq(&[
                seq(&[tlv(OID, OID_EC_PUBLIC_KEY), tlv(OID, curve)]),
                tlv(
                    BIT_STRING,
                    &[&[0u8][..], key.public_key().as_ref()].concat(),
                ),
            ]);
            let sign = Box::new(move |m: &[u8]| {
                key.sign(&SystemRandom::new(), m)
                    .map(|s| s.as_ref().to_vec())
                    .map_err(|_| PkiError::Crypto("signing the certificate request failed"))
            });
            (pkcs8.as_ref().to_vec(), spki, sig_alg, sign)
        }
        KeyAlgorithm::Ed25519 => {
            let mut seed = [0u8; 32];
            ring::rand::SecureRandom::fill(&rng, &mut seed)
                .map_err(|_| PkiError::Crypto("no randomness"))?;
            let key = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed)
                .map_err(|_| PkiError::Crypto("making an Ed25519 key failed"))?;
            let pkcs8 = seq(&[
                tlv(INTEGER, &[0]),
                seq(&[tlv(OID, OID_ED25519)]),
                tlv(OCTET_STRING, &tlv(OCTET_STRING, &seed)),
            ]);
            let spki = seq(&[
                seq(&[tlv(OID, OID_ED25519)]),
                tlv(
                    BIT_STRING,
                    &[&[0u8][..], key.public_key().as_ref()].concat(),
                ),
            ]);
            let sign = Box::new(move |m: &[u8]| Ok(key.sign(m).as_ref().to_vec()));
            (pkcs8, spki, OID_ED25519, sign)
        }
    };
    let info = seq(&[tlv(INTEGER, &[0]), seq(&[]), spki, tlv(0xa0, &[])]);
    let sig = sign(&info)?;
    let csr = seq(&[
        info,
        seq(&[tlv(OID, sig_alg)]),
        tlv(BIT_STRING, &[&[0u8][..], &sig].concat()),
    ]);
    Ok((pkcs8, csr))
}

/// subjectAltName's GeneralNames: dNSName `[2]` and iPAddress `[7]` entries.
fn general_names(dns: &[String], ips: &[IpAddr]) -> Vec<u8> {
    let mut names: Vec<Vec<u8>> = dns.iter().map(|d| tlv(0x82, d.as_bytes())).collect();
    for ip in ips {
        let octets = match ip {
            IpAddr::V4(v) => v.octets().to_vec(),
            IpAddr::V6(v) => v.octets().to_vec(),
        };
        names.push(tlv(0x87, &octets));
    }
    seq(&names)
}

/// A PKCS#10 certification request (DER) for the PKCS#8 P-256 key given, signed with it: the
/// subject's organizations then its common name, and, when names or addresses are given, a
/// subjectAltName asked for through the extensionRequest attribute.
pub fn csr(
    key_pkcs8: &[u8],
    cn: &str,
    orgs: &[&str],
    dns: &[String],
    ips: &[IpAddr],
) -> Result<Vec<u8>, PkiError> {
    let rng = SystemRandom::new();
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, key_pkcs8, &rng)
        .map_err(|_| PkiError::Crypto("the key is not a PKCS#8 ECDSA P-256 key"))?;
    let mut rdns: Vec<Vec<u8>> = orgs
        .iter()
        .map(|o| {
            tlv(
                SET,
                &seq(&[tlv(OID, OID_O), tlv(UTF8_STRING, o.as_bytes())]),
            )
        })
        .collect();
    rdns.push(tlv(
        SET,
        &seq(&[tlv(OID, OID_CN), tlv(UTF8_STRING, cn.as_bytes())]),
    ));
    let spki = seq(&[
        seq(&[tlv(OID, OID_EC_PUBLIC_KEY), tlv(OID, OID_P256)]),
        tlv(
            BIT_STRING,
            &[&[0u8][..], key.public_key().as_ref()].concat(),
        ),
    ]);
    let attributes = if dns.is_empty() && ips.is_empty() {
        Vec::new()
    } else {
        let exts = seq(&[extension(
            OID_SUBJECT_ALT_NAME,
            false,
            &general_names(dns, ips),
        )]);
        seq(&[tlv(OID, OID_EXTENSION_REQUEST), tlv(SET, &exts)])
    };
    let info = seq(&[tlv(INTEGER, &[0]), seq(&rdns), spki, tlv(0xa0, &attributes)]);
    let sig = key
        .sign(&rng, &info)
        .map_err(|_| PkiError::Crypto("signing the certificate request failed"))?;
    Ok(seq(&[
        info,
        seq(&[tlv(OID, OID_ECDSA_SHA256)]),
        tlv(BIT_STRING, &[&[0u8][..], sig.as_ref()].concat()),
    ]))
}

/// The PEM blocks of a text: each one's label and DER content, in order. Text between blocks
/// is skipped; a block that does not decode is an error naming its label.
pub fn pem_blocks(text: &[u8]) -> Result<Vec<(String, Vec<u8>)>, PkiError> {
    use base64::Engine;
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(label) = line
            .trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut b64 = String::new();
        let mut closed = false;
        for l in lines.by_ref() {
            if l.trim() == end {
                closed = true;
                break;
            }
            b64.push_str(l.trim());
        }
        if !closed {
            return Err(PkiError::PemUnclosed {
                label: label.to_owned(),
            });
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(&b64)
            .map_err(|source| PkiError::PemBase64 {
                label: label.to_owned(),
                source,
            })?;
        out.push((label.to_owned(), der));
    }
    Ok(out)
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An X.509 UTCTime or GeneralizedTime (the `Z` forms DER allows) as Unix seconds.
fn parse_time(tag: u8, v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (year, rest) = match tag {
        UTC_TIME if s.len() == 12 => {
            let yy = digits(0..2)?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, 2)
        }
        GENERALIZED_TIME if s.len() == 14 => (digits(0..4)?, 4),
        _ => return None,
    };
    let f = |i: usize| digits(rest + 2 * i..rest + 2 * i + 2);
    let (mo, d, h, mi, se) = (f(0)?, f(1)?, f(2)?, f(3)?, f(4)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    Some(days_from_civil(year, mo, d) * 86_400 + h * 3600 + mi * 60 + se)
}

/// A DER certificate's validity: notBefore and notAfter, Unix seconds.
pub fn validity(cert: &[u8]) -> Option<(i64, i64)> {
    let (_, cert, _) = read_tlv(cert)?;
    let (_, tbs, _) = read_tlv(cert)?;
    let mut rest = tbs;
    let (tag, _, r) = read_tlv(rest)?;
    rest = r;
    if tag == 0xa0 {
        rest = read_tlv(rest)?.2;
    }
    rest = read_tlv(rest)?.2; // signature algorithm
    rest = read_tlv(rest)?.2; // issuer
    let (_, validity, _) = read_tlv(rest)?;
    let (t1, v1, r) = read_tlv(validity)?;
    let (t2, v2, _) = read_tlv(r)?;
    Some((parse_time(t1, v1)?, parse_time(t2, v2)?))
}

/// A certificate authority for tests (feature `testing`, never in a release build): signs
/// certification requests as a cluster's signer does, for the lifetime asked.
#[cfg(feature = "testing")]
#[derive(Debug)]
pub struct TestCa {
    key_pkcs8: Vec<u8>,
    name: String,
}

#[cfg(feature = "testing")]
impl TestCa {
    pub fn new(name: &str) -> Result<TestCa, PkiError> {
        Ok(TestCa {
            key_pkcs8: new_key_pkcs8()?,
            name: name.to_owned(),
        })
    }

    /// A certificate (PEM) for a PEM or DER request: its subject and public key, valid from
    /// `not_before` to `not_after`, for clients or servers (the request's subjectAltName is not
    /// carried over: tests read the subject and the dates).
    pub fn issue(
        &self,
        request: &[u8],
        not_before: i64,
        not_after: i64,
        server: bool,
    ) -> Result<String, PkiError> {
        let der = match pem_blocks(request)?.into_iter().next() {
            Some((_, d)) => d,
            None => request.to_vec(),
        };
        let (_, req, _) = read_tlv(&der).ok_or(PkiError::Der("the request is not DER"))?;
        let (_, info, _) = read_tlv(req).ok_or(PkiError::Der("no request info"))?;
        let (_, _, r) = read_tlv(info).ok_or(PkiError::Der("no version"))?;
        let (subject_tag, subject, r) = read_tlv(r).ok_or(PkiError::Der("no subject"))?;
        let (spki_tag, spki, _) = read_tlv(r).ok_or(PkiError::Der("no public key"))?;
        let rng = SystemRandom::new();
        let ca = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &self.key_pkcs8, &rng)
            .map_err(|_| PkiError::Crypto("the CA key"))?;
        let purpose: &[u8] = if server {
            OID_SERVER_AUTH
        } else {
            &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02]
        };
        let exts = seq(&[
            extension(OID_BASIC_CONSTRAINTS, true, &seq(&[])),
            extension(OID_KEY_USAGE, true, &tlv(BIT_STRING, &[0x07, 0x80])),
            extension(OID_EXT_KEY_USAGE, false, &seq(&[tlv(OID, purpose)])),
        ]);
        let tbs = seq(&[
            tlv(0xa0, &tlv(INTEGER, &[2])),
            tlv(INTEGER, &serial(&rng)?),
            seq(&[tlv(OID, OID_ECDSA_SHA256)]),
            name(&self.name),
            seq(&[time(not_before), time(not_after)]),
            tlv(subject_tag, subject),
            tlv(spki_tag, spki),
            tlv(0xa3, &exts),
        ]);
        Ok(pem("CERTIFICATE", &sign(&ca, &rng, tbs)?))
    }
}

/// One DER element: its tag, content and what follows it.
fn read_tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject's common name and organizations of a DER certificate: a client certificate's
/// user and groups, as the apiserver and the kubelet read them.
pub fn subject(cert: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert, _) = read_tlv(cert)?;
    let (_, tbs, _) = read_tlv(cert)?;
    let mut rest = tbs;
    let (tag, _, r) = read_tlv(rest)?;
    rest = r;
    if tag == 0xa0 {
        // version; the serial number follows
        rest = read_tlv(rest)?.2;
    }
    rest = read_tlv(rest)?.2; // signature algorithm
    rest = read_tlv(rest)?.2; // issuer
    rest = read_tlv(rest)?.2; // validity
    let (_, mut rdns, _) = read_tlv(rest)?;
    let (mut cn, mut orgs) = (String::new(), Vec::new());
    while !rdns.is_empty() {
        let (_, mut set, r) = read_tlv(rdns)?;
        rdns = r;
        while !set.is_empty() {
            let (_, atv, r) = read_tlv(set)?;
            set = r;
            let (_, oid, r) = read_tlv(atv)?;
            let (_, value, _) = read_tlv(r)?;
            let v = String::from_utf8_lossy(value).into_owned();
            if oid == OID_CN {
                cn = v;
            } else if oid == OID_O {
                orgs.push(v);
            }
        }
    }
    Some((cn, orgs))
}

#[cfg(all(test, feature = "node-api"))]
mod tests {
    use super::*;

    fn der_certs(pem_text: &str) -> Vec<Vec<u8>> {
        use futures_rustls::rustls::pki_types::CertificateDer;
        use futures_rustls::rustls::pki_types::pem::PemObject;
        CertificateDer::pem_slice_iter(pem_text.as_bytes())
            .map(|c| c.unwrap().to_vec())
            .collect()
    }

    #[test]
    fn a_self_signed_chain_verifies_for_its_names_and_addresses() {
        use futures_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let now = 1_780_000_000;
        let s = self_signed(
            "edge-1",
            &["edge-1".into(), "localhost".into()],
            &["127.0.0.1".parse().unwrap()],
            now,
        )
        .unwrap();
        let certs = der_certs(&s.cert_pem);
        assert_eq!(certs.len(), 2);
        let (leaf, ca) = (
            CertificateDer::from(certs[0].clone()),
            CertificateDer::from(certs[1].clone()),
        );
        let mut roots = futures_rustls::rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let verifier = futures_rustls::rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(futures_rustls::rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        use futures_rustls::rustls::client::danger::ServerCertVerifier;
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_780_000_100));
        for name in ["edge-1", "localhost", "127.0.0.1"] {
            let n = ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&leaf, &[], &n, &[], at)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = ServerName::try_from("other-host").unwrap();
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &other, &[], at)
                .is_err()
        );
        // Expired a year and a day later.
        let late = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            1_780_000_000 + 366 * 24 * 3600,
        ));
        let n = ServerName::try_from("edge-1").unwrap();
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &n, &[], late)
                .is_err()
        );
        // The key is one rustls loads.
        use futures_rustls::rustls::pki_types::PrivateKeyDer;
        use futures_rustls::rustls::pki_types::pem::PemObject;
        PrivateKeyDer::from_pem_slice(s.key_pem.as_bytes()).unwrap();
        assert_eq!(
            subject(&certs[0]).unwrap(),
            (format!("edge-1@{now}"), vec![])
        );
    }

    #[test]
    fn the_subject_names_the_user_and_groups() {
        // A client certificate's subject as openssl writes it: several RDNs, O repeated.
        let subj = seq(&[
            tlv(SET, &seq(&[tlv(OID, OID_O), tlv(0x13, b"system:masters")])),
            tlv(SET, &seq(&[tlv(OID, OID_O), tlv(0x13, b"admins")])),
            tlv(
                SET,
                &seq(&[
                    tlv(OID, OID_CN),
                    tlv(UTF8_STRING, b"kube-apiserver-kubelet-client"),
                ]),
            ),
        ]);
        let tbs = seq(&[
            tlv(0xa0, &tlv(INTEGER, &[2])),
            tlv(INTEGER, &[1]),
            seq(&[tlv(OID, OID_ECDSA_SHA256)]),
            name("ca"),
            seq(&[time(0), time(1)]),
            subj,
        ]);
        let cert = seq(&[tbs]);
        assert_eq!(
            subject(&cert).unwrap(),
            (
                "kube-apiserver-kubelet-client".to_owned(),
                vec!["system:masters".to_owned(), "admins".to_owned()]
            )
        );
        assert!(subject(&cert[..cert.len() - 3]).is_none());
        assert!(subject(&[]).is_none());
    }

    #[test]
    fn times_switch_to_generalized_after_2049() {
        assert_eq!(time(0), tlv(UTC_TIME, b"700101000000Z"));
        assert_eq!(
            time(2_524_608_000),
            tlv(GENERALIZED_TIME, b"20500101000000Z")
        );
    }

    #[test]
    fn a_certificate_request_carries_the_subject_names_and_a_valid_signature() {
        let key = new_key_pkcs8().unwrap();
        let der = csr(
            &key,
            "system:node:edge-1",
            &["system:nodes"],
            &["edge-1".into()],
            &["10.0.0.7".parse().unwrap()],
        )
        .unwrap();
        let (_, body, rest) = read_tlv(&der).unwrap();
        assert!(rest.is_empty());
        let (_, info_content, r) = read_tlv(body).unwrap();
        let info_len = body.len() - r.len();
        let info = &body[..info_len];
        let (_, alg, r) = read_tlv(r).unwrap();
        assert_eq!(alg, tlv(OID, OID_ECDSA_SHA256));
        let (tag, sig, _) = read_tlv(r).unwrap();
        assert_eq!(tag, BIT_STRING);
        // The signature verifies with the public key inside the request.
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &key, &rng).unwrap();
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            pair.public_key().as_ref(),
        )
        .verify(info, &sig[1..])
        .unwrap();
        let (_, version, r) = read_tlv(info_content).unwrap();
        assert_eq!(version, [0]);
        let (_, subject, r) = read_tlv(r).unwrap();
        let want = seq(&[
            tlv(
                SET,
                &seq(&[tlv(OID, OID_O), tlv(UTF8_STRING, b"system:nodes")]),
            ),
            tlv(
                SET,
                &seq(&[tlv(OID, OID_CN), tlv(UTF8_STRING, b"system:node:edge-1")]),
            ),
        ]);
        assert_eq!(tlv(SEQUENCE, subject), want);
        let (_, _spki, r) = read_tlv(r).unwrap();
        let (tag, attrs, _) = read_tlv(r).unwrap();
        assert_eq!(tag, 0xa0);
        let text = String::from_utf8_lossy(attrs);
        assert!(text.contains("edge-1"), "the SAN is asked for");
        // A client request asks for no extension at all.
        let client = csr(&key, "system:node:edge-1", &["system:nodes"], &[], &[]).unwrap();
        assert!(client.windows(2).any(|w| w == [0xa0, 0x00]));
        assert!(!String::from_utf8_lossy(&client).contains("edge-1\u{0}"));
    }

    #[test]
    fn pem_blocks_and_validity_read_back_what_was_written() {
        let now = 1_780_000_000;
        let s = self_signed("edge-1", &["edge-1".into()], &[], now).unwrap();
        let text = format!("junk\n{}{}", s.cert_pem, s.key_pem);
        let blocks = pem_blocks(text.as_bytes()).unwrap();
        let labels: Vec<&str> = blocks.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["CERTIFICATE", "CERTIFICATE", "PRIVATE KEY"]);
        assert_eq!(
            validity(&blocks[0].1),
            Some((now - 3600, now + 365 * 24 * 3600))
        );
        // After 2049: GeneralizedTime.
        let late = self_signed("edge-1", &[], &[], 2_600_000_000).unwrap();
        let b = pem_blocks(late.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            validity(&b[0].1).map(|v| v.1),
            Some(2_600_000_000 + 365 * 24 * 3600)
        );
        assert!(validity(b"garbage").is_none());
        let e = pem_blocks(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n")
            .unwrap_err();
        assert!(matches!(e, PkiError::PemBase64 { .. }), "{e:?}");
        assert!(e.to_string().contains("CERTIFICATE"), "{e}");
        let e = pem_blocks(b"-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap_err();
        assert!(e.to_string().contains("no END line"), "{e}");
    }
}
