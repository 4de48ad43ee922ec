//! Bursts: photos shot in quick succession of one scene. Unlike duplicates, the subject may move
//! between frames, so their hashes differ; the embeddings and the clock tie them instead.

use super::events::Timed;

/// One photo as bursts see it: its time as the events' (`Timed`: wall clocks order, instants
/// measure when both photos have them) and its image embedding (unit length).
#[derive(Debug, Clone, Copy)]
pub struct Shot<'a> {
    pub time: Timed,
    pub embedding: &'a [f32],
}

/// Runs of at least two photos, in time order (wall clocks; ties by index), where each photo is at
/// most `max_gap_ms` from the previous one (`Timed::apart_ms`) and its embedding's cosine with the previous one's is at
/// least `min_similarity`. Times without sub-seconds count to the second, as recorded. Bursts
/// come in time order, each photo in at most one.
pub fn bursts(shots: &[Shot], max_gap_ms: i64, min_similarity: f32) -> Vec<Vec<usize>> {
    let mut order: Vec<&Shot> = shots.iter().collect();
    order.sort_by_key(|shot| (shot.time.at_ms, shot.time.index));
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut run: Vec<usize> = Vec::new();
    for pair in order.windows(2) {
        let (previous, shot) = (pair[0], pair[1]);
        let joins = previous.time.apart_ms(&shot.time) <= max_gap_ms
            && cosine(previous.embedding, shot.embedding) >= min_similarity;
        if joins {
            if run.is_empty() {
                run.push(previous.time.index);
            }
            run.push(shot.time.index);
        } else if !run.is_empty() {
            runs.push(std::mem::take(&mut run));
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

/// The cosine of two unit vectors.
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit vector `degrees` from the x axis in the xy plane: cosines between them are known.
    fn turned(degrees: f32) -> Vec<f32> {
        let radians = degrees.to_radians();
        vec![radians.cos(), radians.sin(), 0.0]
    }

    fn shot(index: usize, at_ms: i64, embedding: &[f32]) -> Shot<'_> {
        Shot { time: Timed { index, at_ms, instant_ms: None, place: None }, embedding }
    }

    #[test]
    fn close_in_time_and_alike_make_a_burst_and_either_failing_ends_it() {
        // 10° apart: cosine 0.985; 30°: 0.866, under 0.9.
        let vectors = [turned(0.0), turned(10.0), turned(20.0), turned(50.0), turned(60.0), turned(70.0)];
        let times = [0, 500, 1_000, 1_500, 6_000, 6_400];
        let shots: Vec<Shot> = (0..6).map(|i| shot(i, times[i], &vectors[i])).collect();
        // 0-1-2 a burst; 3 turned too far from 2; 3-4 too far apart in time; 4-5 a burst.
        assert_eq!(bursts(&shots, 2_000, 0.9), vec![vec![0, 1, 2], vec![4, 5]]);
        // A gap of exactly the limit still joins; a looser similarity joins 2-3.
        assert_eq!(bursts(&shots, 4_500, 0.9), vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert_eq!(bursts(&shots, 2_000, 0.85), vec![vec![0, 1, 2, 3], vec![4, 5]]);
    }

    #[test]
    fn order_is_by_time_whatever_the_input_and_ties_by_index() {
        let same = turned(0.0);
        let shots = [shot(3, 2_000, &same), shot(1, 1_000, &same), shot(2, 1_000, &same), shot(0, 9_000, &same)];
        assert_eq!(bursts(&shots, 1_000, 0.9), vec![vec![1, 2, 3]]);
        assert_eq!(bursts(&shots[..1], 1_000, 0.9), Vec::<Vec<usize>>::new());
        assert_eq!(bursts(&[], 1_000, 0.9), Vec::<Vec<usize>>::new());
    }

    #[test]
    fn seconds_without_sub_seconds_count_as_recorded() {
        // 12:00:01 and 12:00:03 recorded to the second are 2 s apart: inside a 2 s gap, not 1.5 s.
        let same = turned(0.0);
        let shots = [shot(0, 1_000, &same), shot(1, 3_000, &same)];
        assert_eq!(bursts(&shots, 2_000, 0.9), vec![vec![0, 1]]);
        assert_eq!(bursts(&shots, 1_500, 0.9), Vec::<Vec<usize>>::new());
    }
}
