/* The job file's keys as a launcher's command-line flags, so a job can be
 * said torchrun-style without a file:
 *     flrun -n 4 -s 1 --compression gtopk:0.01 [JOB.yaml] -- python3 t.py
 * Every key of the job-file table but command and env is a flag, spelled
 * as the key with '-' for '_' (--batch-size); -n and -s are --workers and
 * --servers; the words after "--" are command:. The job is then one text:
 * the job file's, with each flag's value in place of the file's (or
 * added), so flrun parses and flsubmit sends the same job, and an error in
 * the file keeps its line number. No global state; getopt_long is the
 * caller's, fed with the options this module lists. */
#ifndef FLPS_SERVICES_JOBSPEC_FLAGS_H
#define FLPS_SERVICES_JOBSPEC_FLAGS_H

#include <getopt.h>
#include <stddef.h>

#include "common/err.h"
#include "common/strbuf.h"
#include "services/jobspec.h"

/* The short options, for the caller's optstring: -n N and -s N. */
#define JOBSPEC_FLAGS_SHORT "n:s:"

/* getopt_long's value for the flag of the job file's i-th key. */
#define JOBSPEC_FLAGS_VAL 0x4a00

/* Room for the keys (more than the table has). */
#define JOBSPEC_FLAGS_KEYS 128

typedef struct jobspec_flags {
    /* The value each key's flag gave (by the key table's order), borrowed
     * from argv; NULL = not given. A flag given twice keeps the last. */
    const char *value[JOBSPEC_FLAGS_KEYS];
    /* The words after "--", borrowed from argv; 0 = none. */
    char *const *command;
    size_t command_argc;
    /* The line of the job text each flag's value is on (0 = not there),
     * written by jobspec_flags_text for jobspec_flags_explain. */
    unsigned long line[JOBSPEC_FLAGS_KEYS];
    /* The flags' names ("batch-size"), which the options point at. */
    char names[JOBSPEC_FLAGS_KEYS][32];
} jobspec_flags;

/* Clear f: no flag given, no command. */
void jobspec_flags_init(jobspec_flags *f);

/* Write into opts[0..max) one long option per flag (required_argument,
 * val JOBSPEC_FLAGS_VAL + key; names borrowed from f, which must outlive
 * opts) and return how many; no terminator is written. The caller appends
 * them to its own options. Returns 0 when max is too small. */
size_t jobspec_flags_options(jobspec_flags *f, struct option *opts, size_t max);

/* Split argv at the first "--": the words after it become f's command.
 * Returns the argc to hand getopt_long (the words before "--"). */
int jobspec_flags_split(jobspec_flags *f, int argc, char **argv);

/* Take what getopt_long returned: c 'n', 's' or a flag's value with its
 * argument arg. Returns 1 when c is one of the flags (kept), 0 when it is
 * not (the caller's own option), -1 when arg is refused: errbuf then says
 * why as the job file would ("--compression: 'gtop:0.01' is not a codec;
 * expected one of ..."). A caller whose own options use -n or -s handles
 * them before asking here, or, as flsubmit does (its -s is --scheduler
 * before `submit`), hands a getopt_long of its own only the job's words:
 * those after the command, less its own options. */
int jobspec_flags_take(jobspec_flags *f, int c, const char *arg, char *errbuf,
                       size_t errlen);

/* Whether any flag or a command was given. */
int jobspec_flags_given(const jobspec_flags *f);

/* Why word is no flag of a job, for a caller that sets opterr = 0 and
 * says getopt_long's '?' (word unknown; missing 0) or ':' (word lacks its
 * value; missing 1) itself: "--lr needs a value", "--command: the program
 * and its arguments go after '--' ...", "--env: a job's environment is
 * given in a job file ...", "--batch_size is spelled --batch-size ...",
 * "-x is not a flag of a job: ...". word is the
 * option as given ("--lr", "-x", "--lr=..." is cut at '='). Always
 * returns FLPS_ECONFIG, the message in errbuf. */
flps_err jobspec_flags_refuse_word(const char *word, int missing, char *errbuf,
                                   size_t errlen);

/* The words getopt_long left, argv[first..nargs) (nargs as
 * jobspec_flags_split returned it, of argc words): at most one, the job
 * file, in *file (NULL: none). FLPS_ECONFIG, errbuf saying what to write
 * instead, for a second word ("'x' after the job file job.yaml: a program
 * and its arguments go after --, ..."), a Python script where the job
 * file goes ("'train.py': the program and its arguments go after '--'
 * ..."), or "--" with nothing after it. Never does I/O. */
flps_err jobspec_flags_operands(const jobspec_flags *f, int argc, int nargs,
                                char *const *argv, int first, const char **file,
                                char *errbuf, size_t errlen);

/* The job's text: file_text (len bytes; NULL = no job file) with every
 * flag's value in place of the file's value for its key, keys the file
 * does not give added at the end of its mapping, and command: from the
 * words after "--". Without a job file and without --name, name: is made
 * from the command's script or program ("train" for python3 train.py) or
 * the model ("mlp"). A file that is not one mapping is returned as it is,
 * for the parser to say what is wrong with it. Values are written as
 * quoted YAML strings, so any text reads back as given. Records f->line.
 * Returns FLPS_OK with *out (NUL-terminated; caller owns, flps_free) and
 * *outlen; FLPS_ECONFIG (message in errbuf) for a command that is not
 * one (an empty program, over the job file's limits, not UTF-8);
 * FLPS_ENOMEM; FLPS_EINVAL for NULL arguments. Never does I/O. */
flps_err jobspec_flags_text(jobspec_flags *f, const char *file_text, size_t len,
                            char **out, size_t *outlen, char *errbuf,
                            size_t errlen);

/* A parse error of the job text (msg, *where from jobspec_load_text, or
 * the line and field of flsched's refusal of the text) as the user gave
 * it: about a flag's value, "line N: KEY: ..." becomes "--FLAG: ...";
 * anything else is msg as it is. Writes out (len > 0); returns 1 when
 * the message is about a flag (or the command after --), else 0. */
int jobspec_flags_explain(const jobspec_flags *f, const jobspec_where *where,
                          const char *msg, char *out, size_t len);

/* Append to out the flags for a --help text, in the key table's order,
 * wrapped at 78 columns and each line indented by two spaces: "--name,
 * --model, ..., -n/--workers N, -s/--servers N, ...". Returns
 * flps_strbuf_error(out). */
flps_err jobspec_flags_help(flps_strbuf *out);

#endif
