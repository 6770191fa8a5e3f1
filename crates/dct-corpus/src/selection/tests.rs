use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

#[test]
fn selections_compose_and_count() {
    let all = Selection::all(10);
    assert_eq!(all.ranges(), (vec![0u64], vec![10u64]));
    let s = all.select(&[7, 2, 3, 3, 9, 4]).unwrap();
    assert_eq!(s.ranges(), (vec![2u64, 7, 9], vec![5u64, 8, 10]));
    assert_eq!(s.n_cells(), 5);
    assert_eq!((0..5).map(|i| s.base_cell(i, 0).unwrap()).collect::<Vec<_>>(), [2, 3, 4, 7, 9]);
    let t = s.select(&[4, 0]).unwrap();
    assert_eq!((0..2).map(|i| t.base_cell(i, 0).unwrap()).collect::<Vec<_>>(), [2, 9]);
    assert_eq!(s.count_in(3, 8), 3);
    let e = s.select(&[1, 5]).unwrap_err();
    assert_eq!((e.cell, e.position, e.n_cells), (5, 1, 5));
    let m = s.select_mask(&[true, false, true, true, false]).unwrap();
    assert_eq!((0..3).map(|i| m.base_cell(i, 0).unwrap()).collect::<Vec<_>>(), [2, 4, 7]);
    assert!(s.select_mask(&[true]).is_err());
    let (starts, ends) = s.ranges();
    assert_eq!(Selection::from_ranges(&starts, &ends).unwrap(), s);
    assert!(Selection::from_ranges(&[3, 2], &[4, 5]).is_err());
    assert_eq!((s.end(), Selection::default().end(), Selection::all(0).n_cells()), (10, 0, 0));
}

/// Base cells chosen by `pattern` over `n` cells: what a selection must hold, one bool per base cell.
fn model(n: u64, pattern: &str, rng: &mut ChaCha8Rng) -> Vec<bool> {
    (0..n)
        .map(|c| match pattern {
            "random half" => rng.random_bool(0.5),
            "sparse" => rng.random_bool(0.001),
            "runs of 1,000" => (c / 1000) % 2 == 0,
            "dense" => rng.random_bool(0.98),
            // Whole blocks, a scattered block, an empty stretch, a block of runs.
            _ => match c / BLOCK {
                0 | 3 => true,
                1 => rng.random_bool(0.3),
                2 => false,
                _ => (c / 7) % 3 == 0,
            },
        })
        .collect()
}

fn from_model(chosen: &[bool]) -> Selection {
    let mut b = SelectionBuilder::default();
    chosen.iter().enumerate().filter(|(_, k)| **k).for_each(|(c, _)| b.push(c as u64));
    b.finish()
}

#[test]
fn every_query_matches_a_plain_list_of_cells() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let n = 4 * BLOCK + 12_345;
    for pattern in ["random half", "sparse", "runs of 1,000", "dense", "mixed"] {
        let chosen = model(n, pattern, &mut rng);
        let cells: Vec<u64> = (0..n).filter(|&c| chosen[c as usize]).collect();
        let s = from_model(&chosen);
        assert_eq!(s.n_cells(), cells.len() as u64, "{pattern}");
        for (i, &c) in cells.iter().enumerate() {
            assert_eq!(s.base_cell(i as u64, 0).unwrap(), c, "{pattern}: cell {i}");
        }
        assert!(s.base_cell(cells.len() as u64, 3).is_err());
        for _ in 0..2_000 {
            let (a, b) = (rng.random_range(0..=n + 10), rng.random_range(0..=n + 10));
            let (lo, hi) = (a.min(b), a.max(b));
            let want = (cells.partition_point(|&c| c < hi) - cells.partition_point(|&c| c < lo)) as u64;
            assert_eq!(s.count_in(lo, hi), want, "{pattern}: {lo}..{hi}");
        }
        // Ranges: the maximal runs of the list.
        let (starts, ends) = s.ranges();
        let mut runs = (Vec::new(), Vec::new());
        for &c in &cells {
            if runs.1.last() == Some(&c) {
                *runs.1.last_mut().unwrap() = c + 1;
            } else {
                runs.0.push(c);
                runs.1.push(c + 1);
            }
        }
        assert_eq!((starts.clone(), ends.clone()), runs, "{pattern}");
        assert_eq!(Selection::from_ranges(&starts, &ends).unwrap(), s, "{pattern}");
        assert_eq!(Selection::from_bytes(&s.to_bytes()).unwrap(), s, "{pattern}");
        assert_eq!(s.end(), cells.last().map_or(0, |c| c + 1));
        // Selections of the selection, by index and by mask.
        let picks: Vec<u64> = (0..500).map(|_| rng.random_range(0..cells.len() as u64)).collect();
        let mut want: Vec<u64> = picks.iter().map(|&i| cells[i as usize]).collect();
        want.sort_unstable();
        want.dedup();
        let t = s.select(&picks).unwrap();
        assert_eq!((0..t.n_cells()).map(|i| t.base_cell(i, 0).unwrap()).collect::<Vec<_>>(), want);
        let mask: Vec<bool> = (0..cells.len()).map(|_| rng.random_bool(0.7)).collect();
        let m = s.select_mask(&mask).unwrap();
        let want: Vec<u64> = cells.iter().zip(&mask).filter(|(_, k)| **k).map(|(&c, _)| c).collect();
        assert_eq!(m.n_cells(), want.len() as u64);
        assert_eq!(
            m.ranges(),
            from_model(&(0..n).map(|c| want.binary_search(&c).is_ok()).collect::<Vec<_>>()).ranges()
        );
    }
}

#[test]
fn memory_stays_near_a_bit_per_cell_or_a_few_bytes_per_run() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let n = 16 * BLOCK;
    let half = from_model(&model(n, "random half", &mut rng));
    // A bitmap per block: 8 KiB and its counts, where ranges took 24 bytes for each of ~262,000 runs.
    assert!(half.heap_bytes() as u64 <= 16 * (8 * 1024 + 256), "{}", half.heap_bytes());
    let runs = from_model(&model(n, "runs of 1,000", &mut rng));
    // 8 bytes a run (a run crossing into the next block counts in both), and a block's own entry.
    let n_runs = runs.ranges().0.len() + 16;
    assert!(runs.heap_bytes() <= 8 * n_runs + 16 * 64, "{} for {n_runs} runs", runs.heap_bytes());
    assert!(Selection::all(1 << 40).heap_bytes() < 1 << 30, "all of 2^40 cells: a block each, no bitmap");
}

#[test]
fn bytes_that_are_not_a_selection_are_refused_not_trusted() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let s = from_model(&model(3 * BLOCK, "mixed", &mut rng));
    let bytes = s.to_bytes();
    for cut in 0..bytes.len() {
        assert!(Selection::from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(Selection::from_bytes(&longer).unwrap_err().contains("past"));
    let mut header = bytes.clone();
    header[0] ^= 1;
    assert!(Selection::from_bytes(&header).unwrap_err().contains("header"));
    // A claimed count of blocks far past the bytes: an error, nothing allocated for it.
    let mut claims = bytes.clone();
    claims[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(Selection::from_bytes(&claims).is_err());
    // Blocks out of order.
    let two = Selection::from_ranges(&[5, BLOCK + 5], &[6, BLOCK + 6]).unwrap().to_bytes();
    let mut swapped = two.clone();
    let (first, second) = (16, 16 + 8 + 4 + 4);
    let key0: [u8; 8] = swapped[first..first + 8].try_into().unwrap();
    swapped.copy_within(second..second + 8, first);
    swapped[second..second + 8].copy_from_slice(&key0);
    assert!(Selection::from_bytes(&swapped).unwrap_err().contains("order"));
    // Runs backwards.
    let mut backwards = two;
    backwards[16 + 8 + 4..16 + 8 + 8].copy_from_slice(&[9, 0, 3, 0]);
    assert!(Selection::from_bytes(&backwards).unwrap_err().contains("backwards"));
}
