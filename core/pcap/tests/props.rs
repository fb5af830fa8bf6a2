//! Property tests of the capture decoder through its public API: any bytes, as a whole
//! file or as a valid file cut anywhere, are summed up or refused without a panic, and a
//! refusal says what was wrong and where (the header's magic or link type, the record and
//! the byte it starts at); the frames a summary counts are every record before the cut,
//! and a last record cut short is named by where it starts and how much of it is there.

use proptest::prelude::*;
use rocewatch_pcap::{summarize, PcapError, PcapReader, Summary, MAX_CAPLEN};

/// A pcap file header: little- or big-endian, µs timestamps, snap length 65535, `link`.
fn header(le: bool, link: u32) -> Vec<u8> {
    let w = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
    let mut b = Vec::new();
    b.extend_from_slice(&w(0xa1b2_c3d4));
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&w(65535));
    b.extend_from_slice(&w(link));
    b
}

/// `header` and one record per frame; the offset each record starts at.
fn capture(le: bool, link: u32, frames: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
    let w = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
    let mut b = header(le, link);
    let mut starts = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        starts.push(b.len());
        b.extend_from_slice(&w(i as u32));
        b.extend_from_slice(&w(0));
        b.extend_from_slice(&w(f.len() as u32));
        b.extend_from_slice(&w(f.len() as u32 + 4));
        b.extend_from_slice(f);
    }
    (b, starts)
}

/// The frames a reader hands out before it stops, or its error.
fn count_frames(b: &[u8]) -> Result<u64, PcapError> {
    let mut r = PcapReader::new(b)?;
    let mut n = 0;
    while let Some(f) = r.next_frame()? {
        assert!(f.data.len() <= MAX_CAPLEN as usize);
        n += 1;
    }
    Ok(n)
}

/// What a refusal of the bytes `b` must say: where and what, true to the bytes.
fn refusal_names_what_and_where(b: &[u8], e: &PcapError) -> Result<(), TestCaseError> {
    let text = e.to_string();
    match e {
        PcapError::Short(n) => {
            prop_assert!(*n == b.len() && *n < 24, "{}", text);
            prop_assert!(text.contains(&format!("({n} bytes)")), "{}", text);
        }
        PcapError::Magic(m) => {
            prop_assert_eq!(*m, u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            prop_assert!(text.contains(&format!("magic {m:#010x}")), "{}", text);
        }
        PcapError::LinkType(l) => {
            prop_assert!(![1, 113, 276].contains(l), "{}", text);
            prop_assert!(text.contains(&format!("link type {l} ")), "{}", text);
        }
        PcapError::Record {
            index,
            offset,
            what,
        } => {
            prop_assert!(*offset >= 24 && *offset <= b.len() as u64, "{}", text);
            prop_assert!(!what.is_empty());
            prop_assert!(
                text.starts_with(&format!("record {index} at byte {offset}: ")),
                "{}",
                text
            );
        }
        other => prop_assert!(false, "bytes in memory cannot fail to read: {other}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any bytes at all: a summary, or a refusal naming what was wrong and where.
    #[test]
    fn any_bytes_are_summed_up_or_refused_saying_where(
        b in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        match summarize(&b[..]) {
            Ok(s) => prop_assert_eq!(Ok(s.frames), count_frames(&b)),
            Err(e) => refusal_names_what_and_where(&b, &e)?,
        }
    }

    /// Any bytes after a valid header, in either byte order and on every link type read:
    /// records of any length, the header's magic and link type never in question.
    #[test]
    fn any_records_after_a_valid_header_are_read_or_refused_by_record(
        le in any::<bool>(),
        link in prop::sample::select(vec![1u32, 113, 276]),
        body in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut b = header(le, link);
        b.extend_from_slice(&body);
        match summarize(&b[..]) {
            Ok(s) => prop_assert!(s.frames <= body.len() as u64 / 16),
            Err(e) => {
                prop_assert!(matches!(e, PcapError::Record { .. }), "{}", e);
                refusal_names_what_and_where(&b, &e)?;
            }
        }
    }

    /// A capture of any frames cut at any byte after its header: the records before the
    /// cut are counted, a cut inside the first record is refused naming it, a cut inside a
    /// later one is reported with where that record starts and how much of it is there.
    #[test]
    fn a_capture_cut_anywhere_counts_the_records_before_the_cut(
        le in any::<bool>(),
        link in prop::sample::select(vec![1u32, 113, 276]),
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..120), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let (file, starts) = capture(le, link, &frames);
        let cut = 24 + cut.index(file.len() - 24 + 1);
        let b = &file[..cut];
        let end = |i: usize| starts[i] + 16 + frames[i].len();
        let whole = (0..frames.len()).filter(|&i| end(i) <= cut).count();
        let inside = (0..frames.len()).find(|&i| starts[i] < cut && cut < end(i));
        match (summarize(b), inside) {
            (Ok(Summary { frames: n, truncated: None, .. }), None) => {
                prop_assert_eq!(n, whole as u64)
            }
            (Ok(Summary { frames: n, truncated: Some(t), .. }), Some(i)) if i > 0 => {
                prop_assert_eq!(n, whole as u64);
                prop_assert_eq!(t.record, i as u64);
                prop_assert_eq!(t.offset, starts[i] as u64);
                prop_assert_eq!(t.have, (cut - starts[i]) as u64);
                // Cut inside the record's header, its length is not known: the header's 16.
                let need = if cut - starts[i] < 16 { 16 } else { 16 + frames[i].len() };
                prop_assert_eq!(t.need, need as u64);
                let said = format!("inside record {i} (at byte {}: {} of its {need} bytes)", starts[i], t.have);
                prop_assert!(t.to_string().contains(&said), "{}", t);
            }
            (Err(e @ PcapError::Record { index: 0, offset: 24, .. }), Some(0)) => {
                refusal_names_what_and_where(b, &e)?;
            }
            (got, inside) => prop_assert!(false, "cut at {cut} (inside record {inside:?}): {got:?}"),
        }
    }

    /// A frame of any bytes on any link type (and one the reader refuses) decodes as
    /// something; a RoCE v2 packet's QP and PSN are the BTH's 24-bit fields.
    #[test]
    fn any_frame_decodes_as_something(
        link in prop::sample::select(vec![1u32, 113, 276, 0, 228]),
        data in prop::collection::vec(any::<u8>(), 0..400),
        wire_len in any::<u32>(),
    ) {
        let f = rocewatch_pcap::Frame { data: &data, wire_len };
        if let rocewatch_pcap::roce::Decoded::Roce(p) = rocewatch_pcap::roce::decode(link, &f) {
            prop_assert!(p.dest_qp < 1 << 24 && p.psn < 1 << 24);
            prop_assert!(p.aeth.is_none() || rocewatch_pcap::roce::header_len(p.opcode).is_some());
        }
    }
}
