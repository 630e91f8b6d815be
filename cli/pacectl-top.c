/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "pacectl.h"
#include "parse-util.h"
#include "time-util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose);

/* pacectl top: the status, refreshed in place like top(1).
 *
 * Signals are taken through a signalfd rather than handlers: the loop already
 * waits in poll() for the next refresh and for keys, so a resize, Ctrl-C or
 * Ctrl-Z is one more event there, handled in ordinary code that may touch the
 * terminal. That is also what makes sure the terminal leaves raw mode on every
 * way out but SIGKILL. */

#define TOP_LEGEND "DELIVERED: the last whole periods (about 2s); NOW: since the previous refresh."

typedef struct TopSample {
        uint64_t id;
        uint64_t cpu_time_ns;
} TopSample;

typedef struct Top {
        const Args *args;
        pace *p;
        const char *socket_path;

        bool tty_out;         /* redraw in place, cut to the window */
        bool raw_in;          /* stdin is in raw mode: keys are read */
        bool poll_in;         /* stdin still worth polling (no EOF yet) */
        bool cursor_hidden;
        bool clear_screen;    /* the next frame starts on a cleared screen */
        struct termios saved_termios;
        int signal_fd;
        bool mask_saved;
        sigset_t saved_mask;
        unsigned rows, cols;  /* 0: unknown */

        pace_status_report *report; /* the last one, redrawn on a resize */
        char error[512];            /* the last refresh's failure, shown instead */
        uint64_t refreshed_ns;
        /* CPU time since the previous refresh, per reservation of report;
         * UINT64_MAX where there is nothing to compare with. */
        uint64_t *recent_ns;
        uint64_t recent_window_ns;
        TopSample *samples;
        size_t n_samples;
        unsigned frames;
} Top;

typedef enum TopEvent {
        TOP_REFRESH,
        TOP_REDRAW,
        TOP_QUIT,
} TopEvent;

static int write_all(int fd, const char *buf, size_t size) {
        while (size > 0) {
                ssize_t n = write(fd, buf, size);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                buf += n;
                size -= (size_t) n;
        }
        return 0;
}

static void top_read_window_size(Top *t) {
        struct winsize ws = {};

        t->rows = t->cols = 0;
        if (t->tty_out && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) >= 0) {
                t->rows = ws.ws_row;
                t->cols = ws.ws_col;
        }
}

/* Keys arrive one by one and unechoed; ISIG stays, so that Ctrl-C and
 * Ctrl-Z still become signals (which the signalfd then reports). */
static void top_terminal_raw(Top *t) {
        struct termios raw;

        if (!t->raw_in)
                return;
        raw = t->saved_termios;
        raw.c_lflag &= ~(tcflag_t) (ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        (void) tcsetattr(STDIN_FILENO, TCSANOW, &raw);
}

static void top_terminal_restore(Top *t) {
        if (t->cursor_hidden) {
                (void) write_all(STDOUT_FILENO, "\033[?25h", strlen("\033[?25h"));
                t->cursor_hidden = false;
        }
        if (t->raw_in)
                (void) tcsetattr(STDIN_FILENO, TCSANOW, &t->saved_termios);
}

static void top_done(Top *t) {
        top_terminal_restore(t);
        t->signal_fd = safe_close(t->signal_fd);
        if (t->mask_saved)
                (void) sigprocmask(SIG_SETMASK, &t->saved_mask, NULL);
        pace_status_report_free(t->report);
        free(t->recent_ns);
        free(t->samples);
}

static int top_init(Top *t) {
        static const int signals[] = { SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP };
        sigset_t mask;

        /* A reader that goes away (pacectl top | head) ends the loop through
         * a failed write, which then restores the terminal, instead of
         * killing pacectl with the terminal still raw. */
        if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
                return negative_errno();

        sigemptyset(&mask);
        for (size_t i = 0; i < ELEMENTSOF(signals); i++)
                sigaddset(&mask, signals[i]);
        if (sigprocmask(SIG_BLOCK, &mask, &t->saved_mask) < 0)
                return negative_errno();
        t->mask_saved = true;
        t->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (t->signal_fd < 0)
                return negative_errno();

        t->tty_out = isatty(STDOUT_FILENO);
        t->clear_screen = true;
        top_read_window_size(t);

        /* Only in the foreground: a background job changing the terminal's
         * mode would be stopped by SIGTTOU. */
        if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp() &&
            tcgetattr(STDIN_FILENO, &t->saved_termios) >= 0) {
                t->raw_in = true;
                t->poll_in = true;
                top_terminal_raw(t);
        }
        return 0;
}

/* Ctrl-Z: give the shell its terminal back as it was, stop, and take raw
 * mode again when continued. */
static void top_suspend(Top *t) {
        top_terminal_restore(t);
        (void) kill(getpid(), SIGSTOP);
        top_terminal_raw(t);
        top_read_window_size(t);
        t->clear_screen = true;
}

static const TopSample *top_find_sample(const Top *t, uint64_t id) {
        for (size_t i = 0; i < t->n_samples; i++)
                if (t->samples[i].id == id)
                        return &t->samples[i];
        return NULL;
}

/* Asks for a new status; a failure after the first is shown in the frame
 * and retried at the next refresh (libpace reconnects by itself), so that a
 * broker restart does not end the view. */
static int top_refresh(Top *t) {
        _cleanup_(pace_status_report_freep) pace_status_report *s = NULL;
        _cleanup_free_ uint64_t *recent = NULL;
        _cleanup_free_ TopSample *samples = NULL;
        size_t n_samples = 0;
        uint64_t now;
        int r;

        r = pace_status(t->p, &s);
        now = monotonic_ns();
        if (r < 0) {
                const char *m = pace_last_message();

                snprintf(t->error, sizeof(t->error), "status %s: %s (retrying every refresh)",
                         cli_is_refusal(r) ? "refused" : "failed", m ? m : pace_strerror(r));
                return r;
        }
        t->error[0] = '\0';

        recent = calloc(MAX(s->n_reservations, 1u), sizeof(*recent));
        samples = calloc(MAX(s->n_reservations, 1u), sizeof(*samples));
        if (!recent || !samples)
                return -ENOMEM;

        for (size_t i = 0; i < s->n_reservations; i++) {
                const pace_grant *g = &s->reservations[i];
                const TopSample *prev = top_find_sample(t, g->id);

                recent[i] = UINT64_MAX;
                if (!g->accounting.valid)
                        continue;
                /* A counter that went back is a new reservation under an old
                 * id (a broker restart) and says nothing about this interval. */
                if (prev && g->accounting.cpu_time_ns >= prev->cpu_time_ns)
                        recent[i] = g->accounting.cpu_time_ns - prev->cpu_time_ns;
                samples[n_samples++] = (TopSample) { .id = g->id, .cpu_time_ns = g->accounting.cpu_time_ns };
        }

        pace_status_report_free(t->report);
        t->report = TAKE_PTR(s);
        free(t->recent_ns);
        t->recent_ns = TAKE_PTR(recent);
        free(t->samples);
        t->samples = TAKE_PTR(samples);
        t->n_samples = n_samples;
        t->recent_window_ns = t->refreshed_ns > 0 ? now - t->refreshed_ns : 0;
        t->refreshed_ns = now;
        return 0;
}

static int top_print_reservations(FILE *f, const Top *t) {
        /* The status's two tables in one line per reservation, without what
         * does not change (uid, budget, slot): a live view is read across. */
        static const TableColumn columns[] = {
                { "ID", true }, { "PID", true }, { "KIND" }, { "SCOPE" }, { "THREADS", true }, { "CPU", true },
                { "PERIOD" }, { "REQUESTED", true }, { "GRANTED", true }, { "DELIVERED", true }, { "NOW", true },
                { "PERIODS", true }, { "BLOCKED", true }, { "WANTED MORE", true },
        };
        const pace_status_report *s = t->report;
        _cleanup_(table_freep) Table *tab = NULL;

        if (s->n_reservations == 0) {
                fprintf(f, "No reservations.\n");
                return 0;
        }

        if (table_new(columns, ELEMENTSOF(columns), s->n_reservations, &tab) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_reservations; i++) {
                const pace_grant *g = &s->reservations[i];
                const pace_accounting *a = &g->accounting;

                table_printf(tab, i, 0, "%" PRIu64, g->id);
                table_printf(tab, i, 1, "%d", (int) g->pid);
                table_printf(tab, i, 2, "%s", cli_kind_name(g->kind));
                format_scope(table_cell(tab, i, 3), TABLE_CELL_MAX, g);
                format_threads(table_cell(tab, i, 4), TABLE_CELL_MAX, g);
                table_printf(tab, i, 5, "%d", g->cpu);
                format_duration(table_cell(tab, i, 6), TABLE_CELL_MAX, g->period_ns);
                format_ppm(table_cell(tab, i, 7), TABLE_CELL_MAX, g->requested_utilization_ppm);
                format_ppm(table_cell(tab, i, 8), TABLE_CELL_MAX, granted_ppm(g));
                format_delivered(table_cell(tab, i, 9), TABLE_CELL_MAX, g);
                if (t->recent_ns[i] == UINT64_MAX)
                        table_printf(tab, i, 10, "-");
                else
                        format_share(table_cell(tab, i, 10), TABLE_CELL_MAX, t->recent_ns[i], t->recent_window_ns);
                format_count(table_cell(tab, i, 11), TABLE_CELL_MAX, g, a->periods);
                format_count(table_cell(tab, i, 12), TABLE_CELL_MAX, g, a->periods_blocked);
                format_count(table_cell(tab, i, 13), TABLE_CELL_MAX, g, a->periods_wanted_more);
        }
        table_print(tab, f);
        return 0;
}

static int top_render(FILE *f, const Top *t) {
        char clock[16] = "", interval[TABLE_CELL_MAX], share[TABLE_CELL_MAX];
        struct tm tm;
        time_t now = time(NULL);

        if (localtime_r(&now, &tm))
                strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
        fprintf(f, "pacectl top - %s - refresh every %s%s\n", clock,
                format_duration(interval, sizeof(interval), t->args->interval_ns),
                t->raw_in ? ", q to quit" : "");

        if (t->error[0]) {
                fprintf(f, "%s: %s\n", cli_program, t->error);
                return 0;
        }

        fprintf(f, "%zu reservation%s, non-real-time share %s of every CPU, table generation %" PRIu64 "\n\n",
                t->report->n_reservations, t->report->n_reservations == 1 ? "" : "s",
                format_ppm(share, sizeof(share), t->report->non_rt_share_ppm), t->report->generation);
        if (print_cpus(f, t->report, true) < 0)
                return -ENOMEM;
        fputc('\n', f);
        if (top_print_reservations(f, t) < 0)
                return -ENOMEM;
        if (t->report->n_reservations > 0)
                fprintf(f, "%s\n", TOP_LEGEND);
        return 0;
}

/* On a terminal: home, then each line cleared to its end and cut to the
 * window, then the rest of the screen cleared: no flicker, and nothing of a
 * longer previous frame left over. Elsewhere: frames one after another,
 * separated by a blank line. */
static int top_show(Top *t) {
        _cleanup_free_ char *frame = NULL, *out = NULL;
        _cleanup_(fclosep) FILE *f = NULL, *o = NULL;
        size_t frame_size = 0, out_size = 0;
        int r;

        f = open_memstream(&frame, &frame_size);
        if (!f)
                return -ENOMEM;
        r = top_render(f, t);
        if (r < 0)
                return r;
        if (fflush(f) != 0)
                return -ENOMEM;

        if (!t->tty_out) {
                r = t->frames > 0 ? write_all(STDOUT_FILENO, "\n", 1) : 0;
                if (r >= 0)
                        r = write_all(STDOUT_FILENO, frame, frame_size);
                t->frames++;
                return r;
        }

        o = open_memstream(&out, &out_size);
        if (!o)
                return -ENOMEM;
        if (!t->cursor_hidden) {
                fputs("\033[?25l", o);
                t->cursor_hidden = true;
        }
        fputs(t->clear_screen ? "\033[H\033[2J" : "\033[H", o);
        t->clear_screen = false;

        /* One row less than the window: a newline on its last row would
         * scroll the frame's first line away. */
        unsigned row = 0;
        for (const char *line = frame; line < frame + frame_size;) {
                const char *end = memchr(line, '\n', (size_t) (frame + frame_size - line));
                size_t len = end ? (size_t) (end - line) : (size_t) (frame + frame_size - line);

                if (t->rows > 0 && row + 1 >= t->rows)
                        break;
                fwrite(line, 1, t->cols > 0 ? MIN(len, (size_t) t->cols) : len, o);
                fputs("\033[K\n", o);
                row++;
                line += len + 1;
        }
        fputs("\033[J", o);
        if (fflush(o) != 0)
                return -ENOMEM;

        t->frames++;
        return write_all(STDOUT_FILENO, out, out_size);
}

static TopEvent top_on_signal(Top *t) {
        struct signalfd_siginfo si;

        while (read(t->signal_fd, &si, sizeof(si)) == (ssize_t) sizeof(si))
                switch (si.ssi_signo) {
                case SIGWINCH:
                        top_read_window_size(t);
                        /* Lines the old window wrapped are on the screen
                         * in places the next frame does not write. */
                        t->clear_screen = true;
                        return TOP_REDRAW;
                case SIGTSTP:
                        top_suspend(t);
                        return TOP_REDRAW;
                default: /* SIGINT, SIGTERM, SIGHUP */
                        return TOP_QUIT;
                }
        return TOP_REDRAW;
}

static TopEvent top_on_key(Top *t) {
        char keys[64];
        ssize_t n = read(STDIN_FILENO, keys, sizeof(keys));

        if (n <= 0) {
                /* End of input (a hung-up terminal): nothing more to read,
                 * and polling it again would spin. */
                if (n == 0 || (errno != EINTR && errno != EAGAIN))
                        t->poll_in = false;
                return TOP_REDRAW;
        }
        for (ssize_t i = 0; i < n; i++)
                if (keys[i] == 'q' || keys[i] == 'Q')
                        return TOP_QUIT;
        for (ssize_t i = 0; i < n; i++)
                if (keys[i] == ' ')
                        return TOP_REFRESH;
        return TOP_REDRAW;
}

/* Waits for the refresh due at deadline_ns, or an event before it. */
static TopEvent top_wait(Top *t, uint64_t deadline_ns) {
        for (;;) {
                struct pollfd pfd[2] = {
                        { .fd = t->signal_fd, .events = POLLIN },
                        { .fd = STDIN_FILENO, .events = POLLIN },
                };
                uint64_t now = monotonic_ns();
                TopEvent e;
                int n;

                if (now >= deadline_ns)
                        return TOP_REFRESH;

                n = poll(pfd, t->poll_in ? 2 : 1,
                         (int) MIN((deadline_ns - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC, (uint64_t) INT_MAX));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return TOP_QUIT;
                }
                if (pfd[0].revents) {
                        e = top_on_signal(t);
                        if (e != TOP_REDRAW || t->tty_out)
                                return e;
                }
                if (t->poll_in && pfd[1].revents) {
                        e = top_on_key(t);
                        if (e != TOP_REDRAW)
                                return e;
                }
        }
}

/* A failed write: the reader went away (as with `| head`, not an error
 * worth a word) or the output is broken. */
static int top_output_failure(int r) {
        if (r == -EPIPE)
                return EXIT_OK;
        if (r == -ENOMEM)
                return report_output_failure(r);
        fprintf(stderr, "%s: cannot write the output: %s\n", cli_program, strerror(-r));
        return EXIT_TRANSPORT;
}

int do_top(pace *p, const Args *args, const char *socket_path) {
        _cleanup_(top_done) Top t = {
                .args = args,
                .p = p,
                .socket_path = socket_path,
                .signal_fd = -EBADF,
        };
        unsigned shown = 0;
        int r;

        /* Before the terminal is touched: a broker that cannot be asked at
         * all is reported like any other command's failure. */
        r = top_refresh(&t);
        if (r < 0)
                return report_failure("status", socket_path, r);

        r = top_init(&t);
        if (r < 0) {
                fprintf(stderr, "%s: cannot set up the terminal: %s\n", cli_program, strerror(-r));
                return EXIT_TRANSPORT;
        }

        for (;;) {
                TopEvent e;

                r = top_show(&t);
                if (r < 0)
                        return top_output_failure(r);
                if (args->iterations > 0 && ++shown >= args->iterations)
                        return EXIT_OK;

                for (;;) {
                        e = top_wait(&t, t.refreshed_ns + args->interval_ns);
                        if (e != TOP_REDRAW)
                                break;
                        r = top_show(&t);
                        if (r < 0)
                                return top_output_failure(r);
                }
                if (e == TOP_QUIT)
                        return EXIT_OK;

                r = top_refresh(&t);
                if (r == -ENOMEM)
                        return report_output_failure(r);
                if (r < 0)
                        /* The next deadline counts from now, not from the
                         * last good refresh, or a dead broker would be asked
                         * in a tight loop. */
                        t.refreshed_ns = monotonic_ns();
        }
}
