//! Which keys this task owns. A key belongs to task `xxh64(key) % count`: the same in every
//! process, release and run (Rust's own hasher is seeded per process), so a retried task, or the
//! same listing read again, always lands each key in the same one task.

use twox_hash::XxHash64;

/// One task of a job of `count` tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    pub index: u32,
    pub count: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TaskError {
    #[error("{name} must be a whole number, not '{value}'")]
    NotANumber { name: &'static str, value: String },
    #[error("AWS_BATCH_JOB_ARRAY_INDEX is set but the task count is not: pass --task-count")]
    AwsCountMissing,
    #[error("task index {index} is not below the task count {count}")]
    OutOfRange { index: u32, count: u32 },
}

impl Task {
    /// The task from the flags, else from Cloud Run's variables, else from AWS Batch's array index
    /// and `--task-count`; with none of them, the one task of a one-task job.
    pub fn resolve(
        flag_index: Option<u32>,
        flag_count: Option<u32>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, TaskError> {
        let number = |name: &'static str| -> Result<Option<u32>, TaskError> {
            var(name).map(|value| value.trim().parse().map_err(|_| TaskError::NotANumber { name, value })).transpose()
        };
        let (env_index, env_count) = match number("CLOUD_RUN_TASK_INDEX")? {
            Some(index) => (Some(index), number("CLOUD_RUN_TASK_COUNT")?),
            None => match number("AWS_BATCH_JOB_ARRAY_INDEX")? {
                Some(_) if flag_count.is_none() => return Err(TaskError::AwsCountMissing),
                aws => (aws, None),
            },
        };
        let task = Task { index: flag_index.or(env_index).unwrap_or(0), count: flag_count.or(env_count).unwrap_or(1) };
        if task.index >= task.count {
            return Err(TaskError::OutOfRange { index: task.index, count: task.count });
        }
        Ok(task)
    }

    pub fn owns(&self, key: &str) -> bool {
        XxHash64::oneshot(0, key.as_bytes()) % u64::from(self.count) == u64::from(self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn flags_override_cloud_run_and_aws_needs_a_count() {
        let cloud_run = [("CLOUD_RUN_TASK_INDEX", "2"), ("CLOUD_RUN_TASK_COUNT", "5")];
        assert_eq!(Task::resolve(None, None, vars(&cloud_run)), Ok(Task { index: 2, count: 5 }));
        assert_eq!(Task::resolve(Some(4), None, vars(&cloud_run)), Ok(Task { index: 4, count: 5 }));
        assert_eq!(Task::resolve(None, None, vars(&[])), Ok(Task { index: 0, count: 1 }));
        let aws = [("AWS_BATCH_JOB_ARRAY_INDEX", "3")];
        assert_eq!(Task::resolve(None, Some(8), vars(&aws)), Ok(Task { index: 3, count: 8 }));
        assert_eq!(Task::resolve(None, None, vars(&aws)), Err(TaskError::AwsCountMissing));
        assert_eq!(Task::resolve(Some(3), Some(3), vars(&[])), Err(TaskError::OutOfRange { index: 3, count: 3 }));
        assert!(matches!(
            Task::resolve(None, None, vars(&[("CLOUD_RUN_TASK_INDEX", "x")])),
            Err(TaskError::NotANumber { name: "CLOUD_RUN_TASK_INDEX", .. })
        ));
    }

    #[test]
    fn every_key_has_exactly_one_task_and_keeps_it() {
        let keys: Vec<String> = (0..3000).map(|i| format!("user/{}/IMG_{i:04}.jpg", i % 37)).collect();
        let tasks: Vec<Task> = (0..3).map(|index| Task { index, count: 3 }).collect();
        let mut per_task = [0usize; 3];
        for key in &keys {
            let owners: Vec<u32> = tasks.iter().filter(|t| t.owns(key)).map(|t| t.index).collect();
            assert_eq!(owners.len(), 1, "{key} owned by {owners:?}");
            per_task[owners[0] as usize] += 1;
        }
        // Spread roughly evenly: no task far from a third.
        assert!(per_task.iter().all(|&n| (800..1200).contains(&n)), "{per_task:?}");
        // The assignment is a fixed function of the key: xxh64 with seed 0 (its published test value).
        assert_eq!(XxHash64::oneshot(0, b""), 0xef46_db37_51d8_e999);
    }
}
