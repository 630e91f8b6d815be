/* SPDX-License-Identifier: MIT */
/* libFuzzer: arbitrary bytes as a client's datagram, through the whole
 * request path (decode, validation, /proc lookups, admission, reply). Every
 * input must produce a decodable reply and leave the broker consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "broker.h"
#include "macro.h"
#include "pace.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_(broker_freep) Broker *b = NULL;
        PaceConfig config;
        uint8_t *reply = NULL;
        size_t reply_size = 0;

        pace_config_init(&config);
        config.n_cpus = 2;
        config.cpus[0] = 0;
        config.cpus[1] = 1;
        /* The target is this process, which runs as root under CI: without
         * the key every reservation would stop at the root-process check. */
        config.reserve_root_processes = !(size > 0 && (data[0] & 2));
        BrokerOptions options = { .config = &config, .runtime_dir_fd = -1, .proc_root = "/proc",
                                  .delegate_uid = geteuid() };
        if (broker_new(&options, &b) < 0)
                abort();

        /* Twice: the second sees whatever the first admitted. Half the time
         * the peer is root, which takes the other branches of the checks. */
        for (int round = 0; round < 2; round++) {
                BrokerPeer peer = { .pid = getpid(), .uid = (size > 0 && (data[0] & 1)) ? 0 : 1000, .pidfd = -1 };
                if (broker_handle(b, &peer, data, size, &reply, &reply_size) < 0)
                        abort();
                Pace__Response *resp = pace__response__unpack(NULL, reply_size, reply);
                if (!resp || resp->version != 1 || resp->body_case == PACE__RESPONSE__BODY__NOT_SET)
                        abort();
                if (resp->body_case == PACE__RESPONSE__BODY_ERROR && (!resp->error->message || !resp->error->message[0]))
                        abort();
                pace__response__free_unpacked(resp, NULL);
                free(reply);
                reply = NULL;
        }
        return 0;
}
