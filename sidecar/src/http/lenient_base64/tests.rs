use super::*;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use proptest::prelude::*;

/// libb64's encoder output: a line break after every 72 characters and one at the end.
fn libb64_style(raw: &[u8]) -> String {
    let plain = STANDARD.encode(raw);
    let mut wrapped = String::new();
    for (i, c) in plain.chars().enumerate() {
        if i > 0 && i % 72 == 0 {
            wrapped.push('\n');
        }
        wrapped.push(c);
    }
    wrapped.push('\n');
    wrapped
}

#[test]
fn a_handle_as_triton_clients_encode_it_decodes_to_its_64_bytes() {
    let handle: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(37)).collect();
    let text = libb64_style(&handle);
    assert_eq!(
        text.matches('\n').count(),
        2,
        "88 characters: a break at 72 and at the end"
    );
    assert_eq!(decode(&text), handle);
}

#[test]
fn characters_outside_the_alphabet_are_skipped_wherever_they_are() {
    // Each of these answers "invalid args" (a 64-byte handle that no device opens) from
    // Triton 2.51, not "must be a valid base64 encoded cudaIpcMemHandle_t".
    let handle: Vec<u8> = (1..=64).collect();
    let plain = STANDARD.encode(&handle);
    for text in [
        format!("{}\r\n{}", &plain[..44], &plain[44..]),
        format!("{}!!{}", &plain[..10], &plain[10..]),
        format!("{}={}", &plain[..8], &plain[8..]),
        format!("{plain}=="),
        plain.trim_end_matches('=').to_string(),
        format!(" {} é\t", plain),
    ] {
        assert_eq!(decode(&text), handle, "{text:?}");
    }
}

#[test]
fn the_url_safe_alphabet_is_not_read() {
    // '-' and '_' are skipped like any other character, so the handle comes out short and
    // is refused by its length, as Triton refuses it.
    let raw = [0xfbu8, 0xff].repeat(32);
    let url_safe = base64::engine::general_purpose::URL_SAFE.encode(&raw);
    assert!(decode(&url_safe).len() < 64);
}

#[test]
fn a_trailing_group_yields_its_whole_bytes_only() {
    assert_eq!(decode(""), b"");
    assert_eq!(decode("Q"), b"");
    assert_eq!(decode("QQ"), b"A");
    assert_eq!(decode("QR"), b"A", "leftover bits are dropped, not checked");
    assert_eq!(decode("QUI"), b"AB");
    assert_eq!(
        decode("QUJ"),
        b"AB",
        "leftover bits are dropped, not checked"
    );
    assert_eq!(decode("QUJD"), b"ABC");
    assert_eq!(decode("QUJDR"), b"ABC");
}

proptest! {
    #[test]
    fn what_a_standard_encoder_writes_decodes_back(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
        prop_assert_eq!(decode(&STANDARD.encode(&raw)), raw.clone());
        prop_assert_eq!(decode(&STANDARD_NO_PAD.encode(&raw)), raw.clone());
        prop_assert_eq!(decode(&libb64_style(&raw)), raw);
    }

    #[test]
    fn noise_between_characters_changes_nothing(
        raw in proptest::collection::vec(any::<u8>(), 0..100),
        noise in proptest::collection::vec((any::<usize>(), "[^A-Za-z0-9+/]{1,3}"), 0..8),
    ) {
        let mut text = STANDARD.encode(&raw);
        for (at, junk) in noise {
            let mut at = at % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert_str(at, &junk);
        }
        prop_assert_eq!(decode(&text), raw);
    }
}
