package cli

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/gpu"
)

func init() { register(newGPUsCmd) }

func newGPUsCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gpus",
		Short: "print this machine's GPU inventory",
		Long: `Prints the GPUs this machine offers. Sources, in order: the declared inventory (--gpu,
repeatable; e.g. --gpu A100-80GB:80GiB:8.0:x4), NVML (binaries built with cgo), nvidia-smi
on PATH, else none (said plainly).`,
		GroupID: groupNode,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	var specs gpu.SpecList
	fs.Var(typed(&specs, "spec"), "gpu", "declare GPUs as MODEL:VRAM:CAP[:xN], e.g. A100-80GB:80GiB:8.0:x4 (repeatable)")
	asJSON := fs.Bool("json", false, "print the inventory as JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runGPUs(cmd.Context(), env, specs.Devices, *asJSON)
	}
	return cmd
}

func runGPUs(ctx context.Context, env *Env, declared []gpu.Device, asJSON bool) error {
	inv, err := gpu.Auto(gpu.Options{Declared: declared}).Discover(ctx)
	if err != nil {
		return fmt.Errorf("discover gpus: %w", err)
	}
	if asJSON {
		return printJSON(env.Stdout, inv)
	}
	printInventory(env, inv)
	return nil
}

func printInventory(env *Env, inv gpu.Inventory) {
	fmt.Fprintf(env.Stdout, "source: %s\n", inv.Source)
	for _, n := range inv.Notes {
		fmt.Fprintf(env.Stdout, "note: %s\n", n)
	}
	if len(inv.Devices) == 0 {
		fmt.Fprintln(env.Stdout, "no GPUs")
		return
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tMODEL\tVRAM TOTAL\tVRAM FREE\tCAPABILITY\tUTIL\tPROCESSES\tUUID")
	for _, d := range inv.Devices {
		util := "-"
		if d.Utilization != gpu.Unknown {
			util = strconv.Itoa(d.Utilization) + "%"
		}
		procs := "-"
		if len(d.Processes) > 0 {
			procs = ""
			for i, p := range d.Processes {
				if i > 0 {
					procs += ","
				}
				procs += fmt.Sprintf("%d(%s)", p.PID, gpu.FormatBytes(p.UsedMemory))
			}
		}
		uuid := d.UUID
		if uuid == "" {
			uuid = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Index, d.Model,
			gpu.FormatBytes(d.VRAMTotal), gpu.FormatBytes(d.VRAMFree), d.Capability, util, procs, uuid)
	}
	tw.Flush()
}
