"""Typed wrappers around the compiled op library, one module per op family."""
