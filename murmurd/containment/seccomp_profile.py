"""The syscall allowlist of every shell child (default deny), as data.

Derived from Docker's default seccomp profile (moby/profiles `seccomp/default.json`, the
unconditional `SCMP_ACT_ALLOW` group, as upstream murmur's is), for a process without
capabilities, then narrowed:

- removed: `execveat` (runs an fd, e.g. a memfd, with no path for Landlock to check),
  `memfd_create` and `memfd_secret` (anonymous executable files), `ptrace`,
  `process_vm_readv`/`process_vm_writev` (Docker allows them on kernels >= 4.8; no build or
  shell tool needs them), `socketcall` (the 32-bit multiplexer: the native ABI only), and every
  call Docker grants only with `CAP_SYS_ADMIN` and the like (`mount`, `umount2`, `pivot_root`,
  `unshare`, `setns`, `chroot`, `bpf`, `perf_event_open`, `fsopen`/`fsmount`/`open_tree`,
  `reboot`, module loading, `kexec_*`, `io_uring_*` ...): none is listed, so each is refused;
- conditional, as Docker has them: `clone` only without namespace flags (`CLONE_NEW*`), `clone3`
  answers `ENOSYS` (its flags live in memory BPF cannot read; glibc falls back to `clone`),
  `personality` only for the five harmless values, `arch_prctl` and `modify_ldt` on x86;
- `socket` (see `seccomp_filter`): `AF_INET`, `AF_INET6`, and `AF_UNIX` only with
  `capabilities.network.unix_sockets: true`; every other family (`AF_NETLINK`, `AF_PACKET`
  always) fails `EACCES`.

An operator extends the list with `MURMURD_SECCOMP_ALLOW` (comma-separated syscall names, in
the environment of `validate`/`run`/`serve`); a name libseccomp does not know is an error.
"""

from __future__ import annotations

ALLOWED: tuple[str, ...] = tuple("""
accept accept4 access adjtimex alarm bind brk cachestat capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64
clock_nanosleep clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2 dup3
epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old
eventfd eventfd2 execve exit exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate
fanotify_mark fchdir fchmod fchmodat fchmodat2 fchown fchown32 fchownat fcntl fcntl64 fdatasync
fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64
fsync ftruncate ftruncate64 futex futex_requeue futex_time64 futex_wait futex_waitv futex_wake
futimesat getcpu getcwd getdents getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32
getgroups getgroups32 getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom
getresgid getresgid32 getresuid getresuid32 getrlimit get_robust_list getrusage getsid getsockname
getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr getxattrat inotify_add_watch
inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy io_getevents io_pgetevents
io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit ipc kill landlock_add_rule
landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr link linkat listen listmount
listxattr listxattrat llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 madvise
map_shadow_stack membarrier mincore mkdir mkdirat mknod mknodat mlock mlock2 mlockall mmap mmap2
mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedreceive_time64 mq_timedsend
mq_timedsend_time64 mq_unlink mremap mseal msgctl msgget msgrcv msgsnd msync munlock munlockall munmap
name_to_handle_at nanosleep newfstatat _newselect open openat openat2 pause pidfd_open
pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl pread64
preadv preadv2 prlimit64 process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read
readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages
removexattr removexattrat rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction
rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait
rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam
sched_get_priority_max sched_get_priority_min sched_getscheduler sched_rr_get_interval
sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam sched_setscheduler
sched_yield seccomp select semctl semget semop semtimedop semtimedop_time64 send sendfile sendfile64
sendmmsg sendmsg sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32
setitimer setpgid setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setuid32
setxattr setxattrat shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 sigprocmask
sigreturn socketpair splice stat stat64 statfs statfs64 statmount statx symlink symlinkat sync
sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun
timer_gettime timer_gettime64 timer_settime timer_settime64 timerfd_create timerfd_gettime
timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask
uname unlink unlinkat uretprobe utime utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid
waitpid write writev
""".split())

# Docker's `includes.arches` groups for the architectures murmurd runs on.
ARCH_SPECIFIC: dict[str, tuple[str, ...]] = {
    "x86_64": ("arch_prctl", "modify_ldt"),
    "aarch64": ("arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2"),
}

# `personality(2)` values Docker allows: PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32, query.
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
CLONE_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10

# What a process-transport CLI agent's runtime needs beyond the list above (name: why), added to
# its filter only (`containment/cli_profile.py`). Empty: traced under the filter (strace, and the
# audit log of SECCOMP_FILTER_FLAG_LOG), Claude Code's Bun, Debian's Node 20 and codex's musl
# binary are refused only `clone3` (ENOSYS: they fall back to `clone`) and, Bun, `memfd_create`
# (EPERM: it falls back), both refused on purpose. A runtime that needs more gets its entry here.
PROCESS_TRANSPORT: dict[str, str] = {}
