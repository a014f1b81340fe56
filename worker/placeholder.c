/* placeholder */ typedef int rt_placeholder_;
