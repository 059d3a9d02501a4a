//! The few fields of an X.509 certificate the sidecar reads itself (RFC 5280 §4.1), with a DER
//! walk: what rustls's parser (webpki) refuses to read for certificates of version 1, which
//! OpenSSL's `x509 -req` makes and clients accept, and the expiry `/status` reports. Nothing
//! here decides trust: a version-1 client certificate is accepted only when a root's key
//! verifies its signature (`client_auth.rs`, with rustls's signature algorithms).

use rustls::pki_types::CertificateDer;

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// A certificate's parts, borrowed from its DER.
#[derive(Debug)]
pub struct Certificate<'a> {
    /// The signed part, whole (tag and length included): the message of the signature.
    pub tbs: &'a [u8],
    /// The signature's AlgorithmIdentifier, its contents (as rustls's algorithms name theirs).
    pub signature_algorithm: &'a [u8],
    /// The signature's bits.
    pub signature: &'a [u8],
    /// Version 1: the TBS certificate has no version field (and so no extensions).
    pub version_1: bool,
    /// The issuer's and subject's names, whole.
    pub issuer: &'a [u8],
    pub subject: &'a [u8],
    /// Validity, in seconds since the epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// The SubjectPublicKeyInfo, whole.
    pub public_key_info: &'a [u8],
}

impl<'a> Certificate<'a> {
    /// The certificate's parts; none where the DER is not a certificate's shape.
    pub fn parse(der_bytes: &'a [u8]) -> Option<Certificate<'a>> {
        let (certificate, _) = der(der_bytes, SEQUENCE)?;
        let (tbs_contents, after_tbs) = der(certificate, SEQUENCE)?;
        let tbs = &certificate[..certificate.len() - after_tbs.len()];
        let (signature_algorithm, rest) = der(after_tbs, SEQUENCE)?;
        let (signature, _) = der(rest, BIT_STRING)?;
        // A signature's bit string has no unused bits.
        let signature = signature.strip_prefix(&[0])?;

        let mut rest = tbs_contents;
        let version_1 = rest.first() != Some(&VERSION);
        if !version_1 {
            rest = der(rest, VERSION)?.1;
        }
        rest = der(rest, INTEGER)?.1; // serial number
        rest = der(rest, SEQUENCE)?.1; // signature algorithm, again
        let (issuer, rest) = whole(rest, SEQUENCE)?;
        let (validity, rest) = der(rest, SEQUENCE)?;
        let (subject, rest) = whole(rest, SEQUENCE)?;
        let (public_key_info, _) = whole(rest, SEQUENCE)?;
        let (not_before, rest) = time(validity)?;
        let (not_after, _) = time(rest)?;
        Some(Certificate {
            tbs,
            signature_algorithm,
            signature,
            version_1,
            issuer,
            subject,
            not_before,
            not_after,
            public_key_info,
        })
    }
}

/// A SubjectPublicKeyInfo's algorithm (the AlgorithmIdentifier's contents) and key bits.
pub fn key_parts(public_key_info: &[u8]) -> Option<(&[u8], &[u8])> {
    let (contents, _) = der(public_key_info, SEQUENCE)?;
    let (algorithm, rest) = der(contents, SEQUENCE)?;
    let (bits, _) = der(rest, BIT_STRING)?;
    Some((algorithm, bits.strip_prefix(&[0])?))
}

/// The certificate's SubjectPublicKeyInfo, whole.
pub fn public_key_info<'a>(cert: &'a CertificateDer<'_>) -> Option<&'a [u8]> {
    Certificate::parse(cert.as_ref()).map(|c| c.public_key_info)
}

/// The certificate's `notAfter`, in seconds since the epoch.
pub fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    Certificate::parse(cert.as_ref()).map(|c| c.not_after)
}

/// One DER element with tag `tag` at the start of `input`: its contents, and what follows it.
fn der(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    let (len, rest) = if len < 0x80 {
        (usize::from(len), rest)
    } else {
        let count = usize::from(len & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (len, &rest[count..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// One DER element, whole (tag and length included), and what follows it.
fn whole(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (_, rest) = der(input, tag)?;
    Some((&input[..input.len() - rest.len()], rest))
}

/// A UTCTime or GeneralizedTime (`…Z`), in seconds since the epoch, and what follows it.
fn time(input: &[u8]) -> Option<(i64, &[u8])> {
    let tag = *input.first()?;
    let (text, rest) = der(input, tag)?;
    let digits = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let (year, digits) = match tag {
        UTC_TIME => {
            let yy: i64 = digits.get(..2)?.parse().ok()?;
            // RFC 5280 §4.1.2.5.1: two-digit years from 50 are the 1900s.
            (
                if yy >= 50 { 1900 + yy } else { 2000 + yy },
                digits.get(2..)?,
            )
        }
        GENERALIZED_TIME => (digits.get(..4)?.parse().ok()?, digits.get(4..)?),
        _ => return None,
    };
    if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |at: usize| -> Option<i64> { digits.get(at..at + 2)?.parse().ok() };
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    let seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
    Some((seconds, rest))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146097 + day_of_era - 719468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_count_from_the_epoch() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11017);
        assert_eq!(days_from_civil(2026, 12, 1), 20788);
    }

    #[test]
    fn times_of_both_forms() {
        let utc = [&[UTC_TIME, 13][..], b"361128221432Z"].concat();
        assert_eq!(time(&utc).map(|(t, _)| t), Some(2_111_523_272));
        let generalized = [&[GENERALIZED_TIME, 15][..], b"20361128221432Z"].concat();
        assert_eq!(time(&generalized).map(|(t, _)| t), Some(2_111_523_272));
        let local = [&[UTC_TIME, 11][..], b"3611282214Z"].concat();
        assert_eq!(time(&local), None);
    }

    #[test]
    fn der_elements_of_short_and_long_lengths() {
        assert_eq!(der(&[0x02, 1, 7, 9], 0x02), Some((&[7u8][..], &[9u8][..])));
        let mut long = vec![0x30, 0x81, 200];
        long.extend(std::iter::repeat_n(1u8, 200));
        assert_eq!(
            der(&long, 0x30).map(|(c, r)| (c.len(), r.len())),
            Some((200, 0))
        );
        assert_eq!(der(&[0x30, 5, 1], 0x30), None);
        assert_eq!(der(&[0x31, 0], 0x30), None);
        assert_eq!(
            whole(&[0x02, 1, 7, 9], 0x02),
            Some((&[2u8, 1, 7][..], &[9u8][..]))
        );
    }
}
