"""Shared pieces of the LLM targets: model shapes, request workloads, per-request metrics and the
async OpenAI-compatible streaming client. Imports no engine."""
