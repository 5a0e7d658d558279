//! Shared helpers: start servers on port 0, poll with a deadline.
