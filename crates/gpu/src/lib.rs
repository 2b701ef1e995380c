//! GPU batches: a pinned staging ring and asynchronous host-to-device copies (placeholder).
