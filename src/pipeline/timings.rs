//! When each stage ran, per photo and per request: the response's `timings_ms` and its
//! `Server-Timing` header come from these.

use std::time::{Duration, Instant};

/// When each stage ran: for one photo, from entering the stage to leaving it; for a request, from
/// the first photo entering the stage to the last one leaving it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Timings {
    pub fetch: Interval,
    pub decode: Interval,
    pub queue: Interval,
    pub inference: Interval,
}

impl Timings {
    /// Widens each stage's interval to also cover `other`'s.
    pub(super) fn cover(&mut self, other: &Timings) {
        self.fetch.cover(other.fetch);
        self.decode.cover(other.decode);
        self.queue.cover(other.queue);
        self.inference.cover(other.inference);
    }
}

/// A stretch of wall-clock time; empty until a stage records one.
#[derive(Debug, Default, Clone, Copy)]
pub struct Interval(Option<(Instant, Instant)>);

impl Interval {
    pub(super) fn new(start: Instant, end: Instant) -> Self {
        Interval(Some((start, end)))
    }

    fn cover(&mut self, other: Interval) {
        let Some((start, end)) = other.0 else { return };
        self.0 = Some(match self.0 {
            None => (start, end),
            Some((s, e)) => (s.min(start), e.max(end)),
        });
    }

    pub fn duration(&self) -> Duration {
        self.0.map_or(Duration::ZERO, |(s, e)| e - s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timings_cover_all_photos() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut request = Timings::default();
        let photo = |start, end| Timings { fetch: Interval::new(t0 + ms(start), t0 + ms(end)), ..Timings::default() };
        request.cover(&photo(5, 10));
        request.cover(&photo(0, 7));
        assert_eq!(request.fetch.duration(), ms(10));
        assert_eq!(request.decode.duration(), Duration::ZERO);
    }
}
