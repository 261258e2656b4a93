package nsjail

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/overlay"
)

// When neonbox-ns runs as root, the jail's ids 0-65535 map to host ids
// hostIDBase to hostIDBase+65535: ids no host account or file owns, so the
// jail's root holds none of host root's powers over host files. The range
// sits in the block systemd leaves unassigned (0x70000000-0x7FFEFFFF,
// systemd's UIDS-GIDS.md).
const (
	hostIDBase  = 0x70000000
	jailIDCount = 65536
)

// idPlan says how ids are mapped for one run.
type idPlan struct {
	rootful bool
	jailUID uint32 // CMD's ids inside the jail
	jailGID uint32
}

// setGroups says the jail may clear its supplementary groups: it maps a
// range of ids (as root). Mapping the caller's single id instead, the
// kernel requires setgroups denied.
func (p idPlan) setGroups() bool { return p.rootful }

// planIDs chooses the mapping for a workspace owned by wsUID:wsGID.
//
// As root: the jail maps 65536 ids onto the unprivileged host range and
// the workspace is presented through an idmapped mount with that same
// mapping, so a workspace file owned by host id n appears owned by jail
// id n. CMD runs as the workspace owner's id, so it can write the
// workspace and what it creates is committed with the owner's ids.
//
// As another user: the jail maps only its root to the caller, who must
// own the workspace; no idmapped mount is needed (or allowed).
func planIDs(wsUID, wsGID uint32) (idPlan, error) {
	p := hostIDs()
	if !p.rootful {
		return p, nil
	}
	if wsUID >= jailIDCount || wsGID >= jailIDCount {
		return idPlan{}, invalidf("workspace owner %d:%d is outside the jail's id range 0-%d", wsUID, wsGID, jailIDCount-1)
	}
	p.jailUID, p.jailGID = wsUID, wsGID
	return p, nil
}

// hostIDs is the mapping of the jail's ids onto the host's, which
// depends only on who runs neonbox-ns (see planIDs): the jail's 65536
// ids on the unused host range as root, else its root on the caller's
// ids (idMap).
func hostIDs() idPlan { return idPlan{rootful: os.Geteuid() == 0} }

// commitIDs translates upper-dir owners back to workspace owners.
func (p idPlan) commitIDs() overlay.IDMap {
	if !p.rootful {
		return overlay.Identity
	}
	return func(uid, gid uint32) (uint32, uint32, error) {
		if uid < hostIDBase || uid >= hostIDBase+jailIDCount || gid < hostIDBase || gid >= hostIDBase+jailIDCount {
			return 0, 0, fmt.Errorf("owner %d:%d is not a jail id", uid, gid)
		}
		return uid - hostIDBase, gid - hostIDBase, nil
	}
}

// upperOwner is the host owner the upper dir's root gets, so the merged
// workspace root looks owned by the workspace owner in the jail.
func (p idPlan) upperOwner(wsUID, wsGID uint32) (int, int) {
	if !p.rootful {
		return os.Geteuid(), os.Getegid()
	}
	return int(hostIDBase + wsUID), int(hostIDBase + wsGID)
}

// mounterOwner is the host owner of the jail's root, which mounts the
// overlay and so must own its work dir.
func (p idPlan) mounterOwner() (int, int) {
	if !p.rootful {
		return os.Geteuid(), os.Getegid()
	}
	return hostIDBase, hostIDBase
}

// idMap is the text of the jail's uid and gid maps as the init's
// CloneInit takes it: "" maps the jail's root to neonbox-ns's own ids.
func (p idPlan) idMap() string {
	if !p.rootful {
		return ""
	}
	return fmt.Sprintf("%d %d %d\n", 0, hostIDBase, jailIDCount)
}

// prepare checks o and decides the run's ids from the workspace owner.
func (o *Options) prepare() (unix.Stat_t, idPlan, error) {
	var ws unix.Stat_t
	if err := o.normalize(); err != nil {
		return ws, idPlan{}, err
	}
	if err := unix.Stat(o.Workspace, &ws); err != nil {
		return ws, idPlan{}, invalidf("workspace %s: %v", o.Workspace, err)
	}
	ids, err := planIDs(ws.Uid, ws.Gid)
	return ws, ids, err
}
