package bpf

// The programs are compiled with clang-19 (Debian: clang-19 llvm-19 libbpf-dev);
// the generated reclaimnet_bpfel.go and reclaimnet_bpfel.o are committed so
// that building the module needs no C toolchain.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -type flow_key -type flow_val -type dest_key -type dest_val -type ks_config -type port_key -type ks_stats reclaimnet reclaimnet.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu
