package main

// `neonbox-ns exec` starts its jail's init before the Go runtime starts
// (see internal/jailinit/prestart.c): the init's start overlaps with this
// process's and with the reading of the command line and policy.

/*
const char neonbox_prestart_cmd[] = "exec";
*/
import "C"
