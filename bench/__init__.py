"""The benchmarks behind `roost bench ...`, apart from the library code they measure: one module per benchmark."""
