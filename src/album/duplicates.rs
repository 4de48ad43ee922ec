//! Near-duplicates: photos whose perceptual hashes are close, grouped.

/// Groups of indices of photos whose hashes are at most `max_bits` apart, linked through each
/// other: the connected groups of the "close" relation, which is what the album app's
/// `DBSCAN(eps, min_samples=2)` over Hamming distances gives. `None` (a photo that failed) is in
/// no group. Only groups of two or more; indices sorted within each, groups by their first.
pub fn duplicate_groups(hashes: &[Option<u64>], max_bits: u32) -> Vec<Vec<usize>> {
    let mut parent: Vec<usize> = (0..hashes.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let known: Vec<(usize, u64)> = hashes.iter().enumerate().filter_map(|(i, h)| h.map(|h| (i, h))).collect();
    for (a, &(i, hash_i)) in known.iter().enumerate() {
        for &(j, hash_j) in &known[a + 1..] {
            if (hash_i ^ hash_j).count_ones() <= max_bits {
                let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
                parent[ri.max(rj)] = ri.min(rj);
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); hashes.len()];
    for &(i, _) in &known {
        let r = root(&mut parent, i);
        groups[r].push(i);
    }
    groups.into_iter().filter(|group| group.len() >= 2).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_chain_into_one_group_and_failures_join_none() {
        // 0 and 2 are 12 bits apart, each 6 from 1: one group through 1. 3 stands alone; 4 failed.
        let hashes = [Some(0), Some(0b11_1111), Some(0b1111_1111_1111), Some(!0), None];
        assert_eq!(duplicate_groups(&hashes, 10), vec![vec![0, 1, 2]]);
        assert_eq!(duplicate_groups(&hashes, 5), Vec::<Vec<usize>>::new());
    }

    #[test]
    fn groups_come_sorted() {
        let hashes = [Some(7), Some(!0), Some(6), Some(!1)];
        assert_eq!(duplicate_groups(&hashes, 1), vec![vec![0, 2], vec![1, 3]]);
    }
}
