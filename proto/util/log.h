// SPDX-License-Identifier: MIT
/* log.h - the daemon's and tools' log: one line per event, with a timestamp
 * and a level, on stderr. */
#ifndef WSRV_LOG_H
#define WSRV_LOG_H

enum log_level { LOG_ERR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Name shown in each line (e.g. "wsrvd"); the string must outlive logging. */
void log_set_ident(const char *ident);

void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
