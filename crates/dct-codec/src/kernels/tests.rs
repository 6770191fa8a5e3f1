use super::*;

const MODES: [WriteMode; 2] = [WriteMode::Cached, WriteMode::Streaming];

/// Every instruction set this processor has, with both write modes.
fn combinations() -> Vec<(Isa, WriteMode)> {
    Isa::available().into_iter().flat_map(|isa| MODES.map(|mode| (isa, mode))).collect()
}

#[test]
fn the_best_instruction_set_is_among_the_available_ones_and_is_tested() {
    let all = Isa::available();
    assert_eq!(all.last(), Some(&Isa::best()));
    if cfg!(all(target_arch = "x86_64", not(miri))) {
        assert!(all.contains(&Isa::Sse2), "SSE2 is part of x86-64");
    }
}

/// Plane pairs with zeros, 65535s and small values, from a fixed xorshift.
fn planes(len: usize, seed: u32) -> (Vec<u8>, Vec<u8>) {
    let mut x = seed | 1;
    let gaps: Vec<u16> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            match x % 9 {
                0 => 0,
                1 => 65_535,
                2 => 256,
                3 => (x >> 8) as u16,
                _ => (x % 5) as u16 + 1,
            }
        })
        .collect();
    (gaps.iter().map(|&g| g as u8).collect(), gaps.iter().map(|&g| (g >> 8) as u8).collect())
}

/// The obvious serial model.
fn model_prefix(lo: &[u8], hi: &[u8]) -> (Vec<i32>, u32, u64) {
    let mut acc = 0u32;
    let gaps = lo.iter().zip(hi).map(|(&l, &h)| u32::from(l) | u32::from(h) << 8);
    let sums = gaps
        .clone()
        .map(|g| {
            acc = acc.wrapping_add(g);
            acc as i32
        })
        .collect();
    (sums, gaps.filter(|&g| g == 0).count() as u32, u64::from(acc))
}

fn check_counts<V: CountValue + PartialEq + std::fmt::Debug>(lo: &[u8], hi: &[u8], offset: usize) {
    let n = lo.len();
    let want: Vec<V> = lo.iter().zip(hi).map(|(&l, &h)| V::from_stream(u16::from(l) | u16::from(h) << 8)).collect();
    let want_zero = lo.iter().zip(hi).any(|(&l, &h)| l == 0 && h == 0);
    // An output starting `offset` elements into a buffer: every alignment of the start.
    for (isa, mode) in combinations() {
        let mut buf = vec![V::default(); n + offset + 3];
        let zero = counts_with(isa, lo, hi, &mut buf[offset..offset + n], mode);
        assert_eq!(zero, want_zero, "{isa:?} {mode:?}: len {n} offset {offset}");
        assert_eq!(&buf[offset..offset + n], &want[..], "{isa:?} {mode:?}: len {n} offset {offset}");
        let outside = buf[..offset].iter().chain(&buf[offset + n..]);
        assert!(outside.into_iter().all(|v| *v == V::default()), "{isa:?} {mode:?}: wrote outside");
    }
}

#[test]
fn counts_match_the_model_for_every_type_length_and_alignment() {
    for len in (0..80).chain([255, 256, 257, 4099]) {
        for seed in 1..4 {
            let (lo, hi) = planes(len, seed * 7919 + len as u32);
            for offset in 0..4 {
                check_counts::<f32>(&lo, &hi, offset);
                check_counts::<u32>(&lo, &hi, offset);
                check_counts::<i32>(&lo, &hi, offset);
                check_counts::<u64>(&lo, &hi, offset);
                check_counts::<f64>(&lo, &hi, offset);
            }
        }
    }
}

#[test]
fn a_zero_anywhere_is_reported() {
    for len in [1, 15, 16, 17, 40, 100] {
        for at in 0..len {
            let (lo, hi) = (vec![1u8; len], vec![0u8; len]);
            let (mut lo, hi) = (lo, hi);
            lo[at] = 0;
            let mut out = vec![0f32; len + 1];
            for (offset, (isa, mode)) in
                [0, 1].into_iter().flat_map(|o| combinations().into_iter().map(move |c| (o, c)))
            {
                let zero = counts_with(isa, &lo, &hi, &mut out[offset..offset + len], mode);
                assert!(zero, "{isa:?} {mode:?}: len {len} zero at {at}");
            }
        }
        let mut out = vec![0u32; len];
        for (isa, mode) in combinations() {
            assert!(!counts_with(isa, &vec![1u8; len], &vec![0u8; len], &mut out, mode), "{isa:?} {mode:?}");
        }
    }
}

#[test]
fn prefix_sums_match_the_model_for_every_length_and_alignment() {
    for len in (0..80).chain([255, 256, 257, 4099]) {
        for seed in 1..4 {
            let (lo, hi) = planes(len, seed * 104_729 + len as u32);
            let (want, zeros, last) = model_prefix(&lo, &hi);
            for offset in 0..4 {
                for (isa, mode) in combinations() {
                    let mut buf = vec![-1i32; len + offset + 3];
                    let got = prefix_sum_with(isa, &lo, &hi, &mut buf[offset..offset + len], mode);
                    let at = format!("{isa:?} {mode:?}: len {len} offset {offset}");
                    assert_eq!(got, (zeros, last), "{at}");
                    assert_eq!(&buf[offset..offset + len], &want[..], "{at}");
                    let outside = buf[..offset].iter().chain(&buf[offset + len..]);
                    assert!(outside.into_iter().all(|&v| v == -1), "{at}: wrote outside");
                }
                let mut row = vec![-1i32; len];
                assert_eq!(portable_prefix_sum_u32(&lo, &hi, &mut row), (zeros, last), "portable, len {len}");
                assert_eq!(row, want, "portable, len {len}");
            }
        }
    }
}

#[test]
fn the_longest_32_bit_cell_counts_every_zero_and_does_not_wrap() {
    let n = crate::chunk::MAX_U32_SUM_LEN;
    let (lo, hi) = (vec![0xffu8; n], vec![0xffu8; n]);
    let (zero_lo, zero_hi) = (vec![0u8; n], vec![0u8; n]);
    let mut row = vec![0i32; n];
    for (isa, mode) in combinations() {
        assert_eq!(prefix_sum_with(isa, &lo, &hi, &mut row, mode), (0, u64::from(u32::MAX)), "{isa:?} {mode:?}");
        assert_eq!(prefix_sum_with(isa, &zero_lo, &zero_hi, &mut row, mode), (n as u32, 0), "{isa:?} {mode:?}");
    }
}
