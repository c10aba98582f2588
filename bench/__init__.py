"""Benchmarks: measurements of the product code, kept out of the product packages."""
