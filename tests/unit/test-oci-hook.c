/* SPDX-License-Identifier: MIT */
/* pace-oci-hook's core: the annotation's grammar (every refusal names the
 * pair at fault), the state a runtime hands a hook, and the request made of
 * them (a tree, on behalf of the container's init). */
#include <string.h>

#include "hook-core.h"
#include "macro.h"
#include "test.h"

static void assert_refused(const char *value, const char *says) {
        OciReservation r;
        char why[512] = "";

        ASSERT_EQ(oci_reservation_parse(value, &r, why, sizeof(why)), -EINVAL);
        ASSERT_CONTAINS(why, says);
}

TEST(an_annotation_names_period_and_share_and_may_name_cpu_kind_and_required) {
        OciReservation r;
        char why[512];

        ASSERT_OK(oci_reservation_parse("period=20ms,util=30%", &r, why, sizeof(why)));
        ASSERT_EQ(r.period_ns, 20000000u);
        ASSERT_EQ(r.utilization_ppm, 300000u);
        ASSERT_EQ(r.cpu, -1);
        ASSERT_EQ(r.kind, PACE__KIND__KIND_UNSPECIFIED);
        ASSERT_FALSE(r.required);

        ASSERT_OK(oci_reservation_parse("util=0.5;period=1.5ms, cpu=3,kind=server required", &r, why, sizeof(why)));
        ASSERT_EQ(r.period_ns, 1500000u);
        ASSERT_EQ(r.utilization_ppm, 500000u);
        ASSERT_EQ(r.cpu, 3);
        ASSERT_EQ(r.kind, PACE__KIND__KIND_SERVER);
        ASSERT_TRUE(r.required);
}

TEST(a_bad_annotation_is_refused_naming_what_is_wrong) {
        assert_refused("period=20ms", "period and util are both needed");
        assert_refused("util=30%", "period and util are both needed");
        assert_refused("period=20,util=30%", "period \"20\" is not a duration");
        assert_refused("period=20ms,util=0%", "util \"0%\" is not a share");
        assert_refused("period=20ms,util=130%", "util \"130%\"");
        assert_refused("period=20ms,util=30%,cpu=-1", "cpu \"-1\" is not a CPU number");
        assert_refused("period=20ms,util=30%,kind=fast", "kind \"fast\" is none of");
        assert_refused("period=20ms,util=30%,period=10ms", "\"period\" is given twice");
        assert_refused("period=20ms,util=30%,priority=99", "unknown key \"priority\"");
        assert_refused("period=20ms,util=30%,fast", "\"fast\" is not a key=value pair");
        assert_refused(NULL, "missing");
}

static int parse(const char *json, OciState *s, char *why, size_t size) {
        return oci_state_parse(json, strlen(json), s, why, size);
}

TEST(the_state_gives_id_status_pid_and_the_annotation) {
        OciState s;
        char why[600];

        ASSERT_OK(parse("{\"ociVersion\":\"1.0.2\",\"id\":\"web\",\"pid\":4242,\"status\":\"creating\","
                        "\"bundle\":\"/b\",\"annotations\":{\"io.pace.reservation\":\"period=20ms,util=30%\","
                        "\"other\":\"x\"}}",
                        &s, why, sizeof(why)));
        ASSERT_STREQ(s.id, "web");
        ASSERT_STREQ(s.status, "creating");
        ASSERT_EQ(s.pid, 4242);
        ASSERT_TRUE(s.annotated);
        ASSERT_EQ(s.want.utilization_ppm, 300000u);

        /* Without the annotation: nothing asked. */
        ASSERT_OK(parse("{\"id\":\"db\",\"pid\":7,\"status\":\"created\",\"annotations\":{\"a\":\"b\"}}", &s, why,
                        sizeof(why)));
        ASSERT_FALSE(s.annotated);
        ASSERT_OK(parse("{\"id\":\"db\",\"pid\":7}", &s, why, sizeof(why)));
        ASSERT_FALSE(s.annotated);
}

TEST(a_bad_state_is_refused_with_a_reason) {
        OciState s;
        char why[600];

        ASSERT_EQ(parse("not json", &s, why, sizeof(why)), -EINVAL);
        ASSERT_CONTAINS(why, "not JSON");
        ASSERT_EQ(parse("[1]", &s, why, sizeof(why)), -EINVAL);
        ASSERT_CONTAINS(why, "not a JSON object");
        ASSERT_EQ(parse("{\"pid\":-3}", &s, why, sizeof(why)), -EINVAL);
        ASSERT_CONTAINS(why, "\"pid\" is not a process id");
        ASSERT_EQ(parse("{\"pid\":1.5}", &s, why, sizeof(why)), -EINVAL);
        ASSERT_EQ(parse("{\"pid\":\"12\"}", &s, why, sizeof(why)), -EINVAL);
        ASSERT_EQ(parse("{\"id\":7}", &s, why, sizeof(why)), -EINVAL);
        ASSERT_CONTAINS(why, "\"id\" is not a string");
        ASSERT_EQ(parse("{\"annotations\":[]}", &s, why, sizeof(why)), -EINVAL);
        ASSERT_EQ(parse("{\"annotations\":{\"io.pace.reservation\":5}}", &s, why, sizeof(why)), -EINVAL);
        ASSERT_CONTAINS(why, "is not a string");
        ASSERT_EQ(parse("{\"pid\":9,\"annotations\":{\"io.pace.reservation\":\"period=1ms\"}}", &s, why,
                        sizeof(why)),
                  -EINVAL);
        ASSERT_CONTAINS(why, "annotation io.pace.reservation=\"period=1ms\": period and util are both needed");
}

TEST(the_request_is_for_the_tree_on_behalf_of_the_init) {
        OciReservation want = { .period_ns = 20000000, .utilization_ppm = 300000, .cpu = 1,
                                .kind = PACE__KIND__KIND_ALIGNED };
        Pace__Request req;
        Pace__ReserveRequest body;
        Pace__Caller caller;

        oci_request_build(&want, 4242, 60001, 777, &req, &body, &caller);
        ASSERT_EQ(req.body_case, PACE__REQUEST__BODY_RESERVE);
        ASSERT_TRUE(req.reserve == &body && req.on_behalf_of == &caller);
        ASSERT_EQ(body.pid, 4242);
        ASSERT_EQ(body.scope, PACE__SCOPE__SCOPE_TREE);
        ASSERT_TRUE(body.has_cpu && body.cpu == 1);
        ASSERT_TRUE(body.has_kind && body.kind == PACE__KIND__KIND_ALIGNED);
        ASSERT_EQ(body.period_ns, 20000000u);
        ASSERT_EQ(caller.uid, 60001u);
        ASSERT_EQ(caller.pid, 4242);
        ASSERT_EQ(caller.start_time, 777u);

        want.cpu = -1;
        want.kind = PACE__KIND__KIND_UNSPECIFIED;
        oci_request_build(&want, 4242, 60001, 777, &req, &body, &caller);
        ASSERT_FALSE(body.has_cpu);
        ASSERT_FALSE(body.has_kind);
}

TEST_MAIN()
