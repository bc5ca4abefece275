"""Evaluation: retrieval (dev set, BEIR), answers (dev sets), QA benchmarks (COVID-QA, PubMedQA) and their metrics."""
