"""murmur-tool-git 0.1.0 (native): a typed JSON wrapper over git's operations, run once per call
(default-artifacts §2.2, §5.4). The `git` binary runs inside this tool, not as a shell call."""

from nativekit.protocol import main
from refs_ops import (
    op_branch, op_checkout, op_clone, op_create_worktree, op_fetch, op_merge, op_pull, op_push, op_remote, op_reset,
    op_switch, op_tag, op_worktree,
)
from worktree_ops import (
    op_add, op_cherry_pick, op_commit, op_diff, op_log, op_restore, op_show, op_stash, op_status, op_symbol_history,
)

OPERATIONS = {
    "status": op_status, "add": op_add, "diff": op_diff, "restore": op_restore, "stash": op_stash,
    "log": op_log, "show": op_show, "symbol_history": op_symbol_history, "commit": op_commit,
    "cherry_pick": op_cherry_pick, "branch": op_branch, "checkout": op_checkout, "switch": op_switch,
    "reset": op_reset, "fetch": op_fetch, "pull": op_pull, "push": op_push, "clone": op_clone,
    "remote": op_remote, "tag": op_tag, "merge": op_merge, "worktree": op_worktree,
    "create_worktree": op_create_worktree,
}

if __name__ == "__main__":
    main(OPERATIONS, input_error_status="error")
