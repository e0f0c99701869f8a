//! # reel-jobs: jobs, queue, worker runtime and the `reel` command
